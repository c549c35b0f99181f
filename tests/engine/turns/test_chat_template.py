from __future__ import annotations

import pytest

from vibechat.engine.errors import GenerationError
from vibechat.engine.turns.backend import ChatMessage
from vibechat.engine.turns.chat_template import ChatTemplate
from vibechat.engine.turns.prompt_format import choose_template

M = ChatMessage


IT = {"general.finetune": "it"}  # what convert_hf_to_gguf.py writes for gemma-3-270m-it


def test_an_instruct_gemma_without_gguf_template_gets_gemma_turns():
    choice = choose_template(None, "gemma3", lambda t: False, IT)
    assert choice.name == "gemma"
    text = ChatTemplate(choice.name, choice.source, bos_token="<bos>").render(
        [M("system", "Be brief."), M("user", "Hi"), M("assistant", "Hello!"), M("user", "Bye")]
    )
    assert text == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_gguf_template_wins():
    assert choose_template("{{ messages[0]['content'] }}", "gemma3", lambda t: True).name == "gguf"
    assert (
        choose_template("{{ messages[0]['content'] }}", "gemma3", lambda t: True, IT).name == "gguf"
    )


@pytest.mark.parametrize(
    ("token", "expected"),
    [("<|im_start|>", "chatml"), ("<|start_header_id|>", "llama3"), (None, "completion")],
)
def test_an_instruct_model_without_template_gets_the_format_its_vocabulary_names(token, expected):
    assert (
        choose_template(
            None, "llama", lambda t: t == token, {"general.name": "Llama 3.2 1B Instruct"}
        ).name
        == expected
    )


def test_template_rejecting_system_role_gets_it_folded_into_first_user_turn():
    source = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    )
    text = ChatTemplate("gguf", source).render([M("system", "S"), M("user", "U")])
    assert text == "[user]S\n\nU"


def test_sandbox_blocks_attribute_escape():
    evil = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(GenerationError):
        ChatTemplate("gguf", evil).render([M("user", "x")])


@pytest.mark.parametrize(
    ("name", "tokens"),
    [
        ("gemma", ("<start_of_turn>", "<end_of_turn>")),
        ("chatml", ("<|im_start|>", "<|im_end|>")),
        ("llama3", ("<|start_header_id|>", "<|eot_id|>")),
    ],
)
def test_every_builtin_format_names_the_tokens_that_end_a_reply(name, tokens):
    from vibechat.engine.turns.prompt_format import BUILTIN_TEMPLATES

    template = ChatTemplate(name, BUILTIN_TEMPLATES[name])
    assert template.turn_tokens == tokens
    assert template.stop_strings == ()


def test_a_gguf_template_ends_replies_on_the_turn_tokens_it_writes():
    chatml_like = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% "
        "endfor %}"
    )
    assert ChatTemplate("gguf", chatml_like).turn_tokens == ("<|im_start|>", "<|im_end|>")
    assert ChatTemplate("gguf", chatml_like).stop_strings == ()


# ------------------------------------------- a GGUF's template is code from outside (issue 13)
from vibechat.engine.errors import ChatTemplateError, TemplateCancelled  # noqa: E402

NESTED_LOOPS = (
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    "{{ messages[0]['content'] }}"
)


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "\x1b" not in text
    return text


def test_a_template_that_loops_too_long_is_stopped_at_its_deadline():
    """Nested range(100000) loops: `vibechat run` had to be killed after 20 s."""
    with pytest.raises(ChatTemplateError) as err:
        ChatTemplate("gguf", NESTED_LOOPS, deadline=0.2).render([M("user", "x")])
    message = one_line(err.value)
    assert (
        "the model's chat template (tokenizer.chat_template in its GGUF file) took longer "
        "than 0.2 s" in message
    )
    assert "use another GGUF build of this model" in message


def test_a_cancel_stops_a_render():
    """The backend's cancel() (Ctrl-C) reaches the template: the loops check it."""
    checks = []

    def cancelled() -> bool:  # turns true after a few thousand checks, wherever the render is
        checks.append(1)
        return len(checks) > 5000

    with pytest.raises(
        TemplateCancelled, match="rendering the model's chat template .* was cancelled"
    ):
        ChatTemplate("gguf", NESTED_LOOPS, cancelled=cancelled).render([M("user", "x")])
    assert len(checks) == 5001  # stopped at the first check that saw the cancel


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("{{ 'x' * 10**8 }}", "made a value of more than"),  # 400 MB before
        ("{{ [1, 2] * 10**8 }}", "made a value of more than"),
        (
            "{{ 9 ** (9 ** 9) }}",
            "made a number of more than 65,536 bits",
        ),  # hangs in C, even at compile time
        (
            "{% set s = namespace(v='x' * 1000) %}{% for i in range(40) %}{% set s.v = "
            "s.v ~ s.v %}{% endfor %}",
            "made a value of more than",
        ),
        (
            "{% set s = namespace(v='x' * 1000) %}{% for i in range(40) %}{% set s.v = "
            "s.v + s.v %}{% endfor %}",
            "made a value of more than",
        ),
        ("{{ 'x' | center(10**9) }}", "asked for 1,000,000,000 (a width or a count)"),
        ("{{ 'x'.ljust(10**9) }}", "asked for 1,000,000,000"),
        ("{{ ('x' * 10000) | replace('x', 'y' * 10000) }}", "made a value of more than"),
        ("{{ ('x' * 10000).replace('x', 'y' * 10000) }}", "made a value of more than"),
        ("{{ range(100000) | join('x' * 1000) }}", "made a value of more than"),
        ("{{ ('x' * 1000).join(range(100000) | map('string')) }}", "made a value of more than"),
        ("{{ '%0999999999d' % 1 }}", "format width or precision of a million or more"),
        ("{{ '%0999999999d' | format(1) }}", "format width or precision of a million or more"),
        ("{{ '{:>999999999}'.format(1) }}", "format width or precision of a million or more"),
        ("{{ range(100000) | slice(10**9) | list }}", "asked for 1,000,000,000"),
        ("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", "wrote more than 1,048,"),
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursed too deeply"),
        (
            "{{ ([[1] * 100] * 1000) | sum(start=[]) }}",
            "summed values other than numbers",
        ),  # quadratic in C
        # Small as a list, huge as text: a list that holds one long string many times.
        ("{% set s = 'x' * 100000 %}{{ [s] * 1000 }}", "made a value of more than"),
        (
            "{% set s = 'x' * 100000 %}{% set l = [s, s, s, s, s, s, s, s, s, s] %}{{ [l, "
            "l, l, l, l] }}",
            "made a value of more than",
        ),
        (
            "{% set s = 'x' * 100000 %}{% set l = [s, s, s, s, s, s, s, s, s, s] %}{{ [l, "
            "l] ~ [l, l, l] }}",
            "made a value of more than",
        ),
        ("{% set s = 'x' * 100000 %}{{ ([[s] * 10] * 10) | join }}", "made a value of more than"),
    ],
)
def test_a_template_cannot_make_huge_values(source, needle):
    with pytest.raises(ChatTemplateError) as err:
        ChatTemplate("gguf", source).render([M("user", "x")])
    assert needle in one_line(err.value) and "so it was stopped" in str(err.value)


def test_a_long_conversation_still_renders():
    """The size bound grows with the conversation: a long chat is no template bomb."""
    big = "word " * 400_000  # 2 MB of user text
    choice = choose_template(None, "gemma3", lambda t: False, IT)
    text = ChatTemplate(choice.name, choice.source).render(
        [M("user", big), M("assistant", "ok"), M("user", big)]
    )
    assert text.count("word") == 800_000
    loops = (
        "{% for m in messages %}{% for c in m['content'][:5000] %}{{ c }}{% endfor %}{% endfor %}"
    )
    assert len(ChatTemplate("gguf", loops).render([M("user", big)])) == 5000


def test_raise_exception_text_is_sanitised():
    source = "{{ raise_exception('Bad role\\x1b]0;pwned\\x07 \\x1b[2J\\nsecond line') }}"
    with pytest.raises(ChatTemplateError) as err:
        ChatTemplate("gguf", source).render([M("user", "x")])
    assert (
        one_line(err.value)
        == "the model's chat template refused the conversation: Bad role second line"
    )


def test_template_errors_are_sanitised_and_one_line():
    with pytest.raises(ChatTemplateError) as err:
        ChatTemplate("gguf", "{{ messages[0]['content'] | nosuchfilter }}\x1b]0;t\x07")
    assert "is broken" in one_line(err.value)
    with pytest.raises(ChatTemplateError) as err:
        ChatTemplate("gguf", "{{ messages[0]['content'].foo('\x1b[2J') }}").render([M("user", "x")])
    assert "failed" in one_line(err.value)


def test_a_template_too_long_to_read_is_refused():
    with pytest.raises(
        ChatTemplateError, match="is 1,048,577 characters long, more than the 1,048,576"
    ):
        ChatTemplate("gguf", "x" * ((1 << 20) + 1))
