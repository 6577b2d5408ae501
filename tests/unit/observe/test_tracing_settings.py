"""Tracing settings that cannot work refuse to start, each in one line."""

from __future__ import annotations

import pytest

from poolserve.config.server_config import check_otlp_endpoint
from poolserve.errors import SettingError
from poolserve.observe.tracing import check_protocol


def test_an_endpoint_without_a_scheme_is_refused_naming_both_forms() -> None:
    with pytest.raises(SettingError) as refused:
        check_otlp_endpoint("127.0.0.1:4317")
    message = refused.value.cli_message
    assert "http://127.0.0.1:4317" in message and "https://127.0.0.1:4317" in message
    check_otlp_endpoint("http://127.0.0.1:4317")
    check_otlp_endpoint("https://collector.example:4317")


def test_an_otlp_protocol_other_than_grpc_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    with pytest.raises(SettingError, match="OTLP/gRPC only"):
        check_protocol()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    check_protocol()
