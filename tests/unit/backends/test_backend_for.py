"""`backend_for`: `--backend auto` resolved by `--quantize`, and a backend whose libraries are
not installed refused in one line naming the extra to install."""

from __future__ import annotations

import sys

import pytest

from poolserve import EngineConfig
from poolserve.backends import backend_for
from poolserve.errors import SettingError


def test_python_defaults_to_torch_and_auto_or_a_multi_precision_engine_chooses() -> None:
    from poolserve.backends.choice.auto_backend import make_backend as choosing
    from poolserve.backends.onnxruntime.ort_backend import make_backend as onnxruntime
    from poolserve.backends.torch.torch_backend import make_backend as torch

    assert backend_for(EngineConfig()) is torch
    assert backend_for(EngineConfig(backend="auto")) is choosing
    assert backend_for(EngineConfig(backend="auto", quantize="int8")) is choosing
    assert backend_for(EngineConfig(backend="onnxruntime")) is onnxruntime
    assert backend_for(EngineConfig(backend="openvino")) is choosing  # float32 or bf16


def test_int8_on_the_torch_backend_is_refused_before_loading() -> None:
    from poolserve.backends.torch.torch_backend import make_backend
    from poolserve.config import ModelConfig
    from poolserve.engine.model_inputs import collate_for
    from poolserve.models.describe import prepare_model

    spec = prepare_model(ModelConfig())
    with pytest.raises(SettingError) as refused:
        make_backend(spec, EngineConfig(backend="torch", quantize="int8"), collate_for(spec))
    assert "--quantize int8 runs on onnxruntime or openvino, not --backend torch" in (
        refused.value.cli_message
    )


def test_a_backend_without_its_libraries_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in sys.modules if name.startswith("poolserve.backends.onnxruntime")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` fails
    with pytest.raises(SettingError) as refused:
        backend_for(EngineConfig(backend="onnxruntime", quantize="int8"))
    assert refused.value.cli_message == (
        "--backend onnxruntime needs onnxruntime: pip install 'poolserve[onnx]' "
        "(--quantize int8 runs on it)"
    )


def test_a_gate_setting_without_quantizing_is_refused() -> None:
    with pytest.raises(SettingError) as refused:
        backend_for(EngineConfig(quantize_gate="fallback"))
    assert refused.value.cli_message.startswith("--quantize-gate fallback says what")
