"""`backend_for`: `--backend auto` resolved by `--quantize`, and a backend whose libraries are
not installed refused in one line naming the extra to install."""

from __future__ import annotations

import sys

import pytest

from poolserve import EngineConfig
from poolserve.backends import backend_for, backend_name
from poolserve.errors import SettingError


def test_auto_is_torch_for_float_and_onnxruntime_for_int8() -> None:
    assert backend_name(EngineConfig()) == "torch"
    assert backend_name(EngineConfig(quantize="int8")) == "onnxruntime"
    assert backend_name(EngineConfig(backend="torch", quantize="int8")) == "torch"


def test_int8_on_the_torch_backend_is_refused_before_loading() -> None:
    from poolserve.backends.torch.torch_backend import make_backend
    from poolserve.config import ModelConfig
    from poolserve.engine.engine_core import collate_for
    from poolserve.models.describe import prepare_model

    spec = prepare_model(ModelConfig())
    with pytest.raises(SettingError) as refused:
        make_backend(spec, EngineConfig(backend="torch", quantize="int8"), collate_for(spec))
    assert "--quantize int8 runs on onnxruntime, not --backend torch" in refused.value.cli_message


def test_a_backend_without_its_libraries_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in sys.modules if name.startswith("poolserve.backends.onnxruntime")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` fails
    with pytest.raises(SettingError) as refused:
        backend_for(EngineConfig(quantize="int8"))
    assert refused.value.cli_message == (
        "--backend onnxruntime needs onnxruntime: pip install 'poolserve[onnx]' "
        "(--quantize int8 runs on it)"
    )


def test_a_gate_setting_without_quantizing_is_refused() -> None:
    with pytest.raises(SettingError) as refused:
        backend_for(EngineConfig(quantize_gate="fallback"))
    assert refused.value.cli_message.startswith("--quantize-gate fallback says what")
