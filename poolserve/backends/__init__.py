"""Model backends, one package each (`torch/`, `onnxruntime/`, `openvino/`), each with a module
whose `make_backend` builds one (engine/model_backend.py says what a backend is). `backend_for`
imports the one `--backend` names (auto: the one `AUTO_BACKEND` names for `--quantize`); the names
themselves live with the setting (config/model_config.py: `BACKENDS`), so that the flags name
them without loading any backend's libraries."""

from __future__ import annotations

import importlib

from poolserve.config import EngineConfig
from poolserve.config.model_config import AUTO_BACKEND, BACKEND_EXTRAS, BACKENDS
from poolserve.engine.model_backend import BackendFactory
from poolserve.errors import SettingError


def backend_name(config: EngineConfig) -> str:
    """The backend `--backend` names, auto resolved."""
    return AUTO_BACKEND[config.quantize] if config.backend == "auto" else config.backend


def backend_for(config: EngineConfig) -> BackendFactory:
    """The factory of the backend `config` names; an unknown name is a SettingError naming them."""
    if config.quantize == "off" and config.quantize_gate != "refuse":
        raise SettingError(
            f"--quantize-gate {config.quantize_gate} says what a quantized model below the gate "
            "gets: pass it with --quantize int8, or leave it out"
        )
    name = backend_name(config)
    module = BACKENDS.get(name)
    if module is None:
        raise SettingError(f"unknown --backend {name!r}; the backends: auto, {', '.join(BACKENDS)}")
    try:
        factory: BackendFactory = importlib.import_module(module).make_backend
    except ImportError as exc:
        extra = BACKEND_EXTRAS.get(name)
        if extra is None:
            raise
        needs = exc.name or "its libraries"
        raise SettingError(
            f"--backend {name} needs {needs}: pip install 'poolserve[{extra}]'"
            + (" (--quantize int8 runs on it)" if config.quantize == "int8" else "")
        ) from exc
    return factory
