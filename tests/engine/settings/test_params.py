from __future__ import annotations

import dataclasses

import pytest

from vibechat.engine.errors import InvalidParameterError
from vibechat.engine.settings.params import PARAM_SPECS, SEED_MAX, SamplingParams


def test_defaults_match_specs():
    params = SamplingParams()
    for name, spec in PARAM_SPECS.items():
        assert getattr(params, name) == spec.default
    assert params.stop == ()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", -0.1, "temperature must be between 0 and 5 (got -0.1)"),
        ("temperature", 7, "temperature must be between 0 and 5 (got 7)"),
        ("top_k", 1001, "top_k must be between 0 and 1000"),
        ("top_k", 2.5, "top_k must be a whole number"),
        ("top_p", 1.5, "top_p must be between 0 and 1"),
        ("min_p", -1, "min_p must be between 0 and 1"),
        ("repeat_penalty", 0, "repeat_penalty must be between 0.1 and 5"),
        (
            "max_tokens",
            -3,
            "max_tokens must be between 0 and 1000000 (0 or 'none': no limit; 'auto': the model's "
            "default)",
        ),
        ("seed", -5, "seed must be between 0 and"),
        ("temperature", float("nan"), "temperature must be a number"),
        ("temperature", "hot", "temperature must be a number"),
    ],
)
def test_out_of_range_values_name_the_parameter_and_range(field, value, message):
    with pytest.raises(InvalidParameterError) as info:
        SamplingParams(**{field: value})
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_valid_edges_are_accepted():
    params = SamplingParams(
        temperature=0,
        top_k=0,
        top_p=1,
        min_p=0,
        repeat_penalty=5,
        max_tokens=1,
        seed=SEED_MAX,
        stop=["\n\n", "User:"],
    )
    assert params.temperature == 0.0 and isinstance(params.temperature, float)
    assert params.stop == ("\n\n", "User:")


def test_stop_strings_are_checked():
    with pytest.raises(InvalidParameterError, match="non-empty"):
        SamplingParams(stop=[""])
    with pytest.raises(InvalidParameterError, match="at most 16"):
        SamplingParams(stop=[str(i) for i in range(17)])


def test_with_seed_draws_a_seed_only_when_missing():
    assert SamplingParams(seed=7).with_seed().seed == 7
    drawn = {SamplingParams().with_seed().seed for _ in range(5)}
    assert None not in drawn and len(drawn) > 1


def test_set_from_text_parses_like_a_user_types():
    params = SamplingParams()
    assert params.set_from_text("temperature", "0.3").temperature == 0.3
    assert params.set_from_text("top-k", "12").top_k == 12
    assert params.set_from_text("max_tokens", "none").max_tokens == 0  # no limit
    assert params.set_from_text("max_tokens", "auto").max_tokens is None  # the model's default
    assert params.set_from_text("repeat_penalty", "off").repeat_penalty == 1.0
    assert params.set_from_text("repeat_penalty", "auto").repeat_penalty is None
    assert params.set_from_text("stop", "a|b").stop == ("a", "b")
    with pytest.raises(InvalidParameterError, match="unknown parameter 'warmth'"):
        params.set_from_text("warmth", "1")
    with pytest.raises(InvalidParameterError, match="top_p must be a number"):
        params.set_from_text("top_p", "lots")


def test_params_are_immutable_and_round_trip():
    params = SamplingParams(temperature=0.5, stop=["x"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.temperature = 1.0  # type: ignore[misc]
    assert SamplingParams.from_dict(params.to_dict()) == params
    with pytest.raises(InvalidParameterError, match="unknown sampling parameter 'bogus'"):
        SamplingParams.from_dict({"bogus": 1})
