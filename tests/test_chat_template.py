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
