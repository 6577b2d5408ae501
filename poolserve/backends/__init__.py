"""Model backends: the runtimes as peers, one package each (`torch/`, `onnxruntime/`,
`openvino/`, `static/`), each with a module whose `make_backend` builds one
(engine/model_backend.py says what a backend is), over what they share (`torch_model/`, the
loaded model; `graph/`, the exported graph), and `choice/` (`--backend auto`), which measures
the installed ones and serves the fastest. `backend_for`
imports the one `--backend` names; the names and what each runtime runs live with the setting
(config/runtime_table.py), so that the flags name them without loading any backend's
libraries."""

from __future__ import annotations

import importlib

from poolserve.config import EngineConfig
from poolserve.config.runtime_table import AUTO_MODULE, RUNTIME_BY_NAME
from poolserve.engine.model_backend import BackendFactory
from poolserve.errors import SettingError
from poolserve.models.spec import ModelSpec

# The runtime of static embedding models (models/static_layout.py): no `--backend` names it.
STATIC_MODULE = "poolserve.backends.static.static_backend"


def backend_for(config: EngineConfig, model: ModelSpec | None = None) -> BackendFactory:
    """The factory of the backend `config` names (auto: the chooser; a runtime with several
    precisions: the chooser narrowed to it, which measures them where `--dtype` is auto); an
    unknown name, or a runtime whose libraries are missing, is a SettingError in one line. A
    static `model` runs on the static runtime, whatever is named (it refuses what does not
    apply)."""
    if model is not None and model.layout.static is not None:
        return _factory(STATIC_MODULE, "static", config)
    if config.quantize == "off" and config.quantize_gate != "refuse":
        raise SettingError(
            f"--quantize-gate {config.quantize_gate} says what a quantized model below the gate "
            "gets: pass it with --quantize int8, or leave it out"
        )
    name = config.backend
    if name == "auto":
        return _factory(AUTO_MODULE, name, config)
    entry = RUNTIME_BY_NAME.get(name)
    if entry is None:
        known = ", ".join(RUNTIME_BY_NAME)
        raise SettingError(f"unknown --backend {name!r}; the backends: auto, {known}")
    factory = _factory(entry.module, name, config)  # first: a missing library says so
    chooses = name != "torch" and len(entry.precisions) > 1  # torch measures its own (precision.py)
    return _factory(AUTO_MODULE, name, config) if chooses else factory


def _factory(module: str, name: str, config: EngineConfig) -> BackendFactory:
    try:
        factory: BackendFactory = importlib.import_module(module).make_backend
    except ImportError as exc:
        entry = RUNTIME_BY_NAME.get(name)
        if entry is None or entry.extra is None:
            raise
        needs = exc.name or "its libraries"
        raise SettingError(
            f"--backend {name} needs {needs}: pip install 'poolserve[{entry.extra}]'"
            + (" (--quantize int8 runs on it)" if config.quantize == "int8" else "")
        ) from exc
    return factory
