"""Which requests are traced (observe/tracing.py's `TraceSampling`): the caller's W3C
traceparent decides where it sends a valid one; a share of the rest, by the ratio given."""

from __future__ import annotations

import random

import pytest

from poolserve.config.server_config import ServerConfig
from poolserve.errors import SettingError
from poolserve.observe.tracing import DEFAULT_SAMPLE_RATIO, TraceSampling

TRACE, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def parent(flags: str, version: str = "00", trace: str = TRACE, span: str = PARENT) -> str:
    return f"{version}-{trace}-{span}-{flags}"


@pytest.mark.parametrize("ratio", [0.0, 0.1, 1.0])
def test_a_callers_sampled_flag_decides_whatever_the_ratio(ratio: float) -> None:
    sampling = TraceSampling(ratio)
    assert sampling.wants(parent("01"))
    assert sampling.wants(parent("03"))  # other flag bits set beside sampled
    assert not sampling.wants(parent("00"))
    assert not sampling.wants(parent("02"))
    assert sampling.wants(f"  {parent('01')} ")  # the header's surrounding blanks
    assert sampling.wants(parent("01", version="01") + "-more")  # a later version's fields


@pytest.mark.parametrize(
    "invalid",
    [
        parent("00", version="ff"),
        parent("00", trace="0" * 32),
        parent("00", span="0" * 16),
        parent("00") + "-more",  # version 00 has four fields
        parent("0x"),
        "not a traceparent",
        "",
    ],
)
def test_an_invalid_traceparent_is_a_root_sampled_by_the_ratio(invalid: str) -> None:
    assert TraceSampling(1.0).wants(invalid)
    assert not TraceSampling(0.0).wants(invalid)


def test_the_ratio_is_the_share_of_roots_traced() -> None:
    random.seed(46)
    wanted = sum(TraceSampling(0.1).wants(None) for _ in range(20_000))
    # Binomial(20,000, 0.1): sd 42; a wrong ratio (0.09 or 0.11) is 200 away.
    assert 1_850 < wanted < 2_150
    assert all(TraceSampling(1.0).wants(None) for _ in range(1_000))
    assert not any(TraceSampling(0.0).wants(None) for _ in range(1_000))


def test_the_flag_wins_then_the_sdks_sampler_then_a_tenth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    assert TraceSampling.configured(None) == TraceSampling(DEFAULT_SAMPLE_RATIO)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
    assert TraceSampling.configured(None) == TraceSampling(None)
    # Every request goes to the SDK, whose sampler decides.
    assert TraceSampling(None).wants(parent("00")) and TraceSampling(None).wants(None)
    assert TraceSampling.configured(0.5) == TraceSampling(0.5)


def test_a_ratio_above_one_is_refused_in_one_line() -> None:
    with pytest.raises(SettingError) as refused:
        ServerConfig(trace_sample_ratio=1.5).check_limits()
    assert "--trace-sample-ratio 1.5 is more than 1" in refused.value.cli_message
    ServerConfig(trace_sample_ratio=1.0).check_limits()
