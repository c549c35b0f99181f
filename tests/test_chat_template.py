from __future__ import annotations

import pytest

from vibechat.engine.backend import ChatMessage
from vibechat.engine.chat_template import ChatTemplate, choose_template
from vibechat.engine.errors import GenerationError

M = ChatMessage


def test_gemma_without_gguf_template_gets_gemma_turns():
    name, source = choose_template(None, "gemma3", lambda t: False)
    assert name == "gemma"
    text = ChatTemplate(name, source, bos_token="<bos>").render(
        [M("system", "Be brief."), M("user", "Hi"), M("assistant", "Hello!"), M("user", "Bye")]
    )
    assert text == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_gguf_template_wins():
    name, source = choose_template("{{ messages[0]['content'] }}", "gemma3", lambda t: True)
    assert name == "gguf"


@pytest.mark.parametrize(("token", "expected"), [("<|im_start|>", "chatml"),
                                                   ("<|start_header_id|>", "llama3"),
                                                   (None, "plain")])
def test_fallback_by_vocabulary(token, expected):
    assert choose_template(None, "llama", lambda t: t == token)[0] == expected


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


@pytest.mark.parametrize(("name", "tokens"), [
    ("gemma", ("<start_of_turn>", "<end_of_turn>")),
    ("chatml", ("<|im_start|>", "<|im_end|>")),
    ("llama3", ("<|start_header_id|>", "<|eot_id|>")),
    ("plain", ()),
])
def test_every_builtin_format_names_the_tokens_that_end_a_reply(name, tokens):
    from vibechat.engine.chat_template import BUILTIN_TEMPLATES

    template = ChatTemplate(name, BUILTIN_TEMPLATES[name])
    assert template.turn_tokens == tokens
    assert template.stop_strings == (("\nUser:",) if name == "plain" else ())


def test_a_gguf_template_ends_replies_on_the_turn_tokens_it_writes():
    chatml_like = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    assert ChatTemplate("gguf", chatml_like).turn_tokens == ("<|im_start|>", "<|im_end|>")
    assert ChatTemplate("gguf", chatml_like).stop_strings == ()
