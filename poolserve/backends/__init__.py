"""Model backends, one package each (`torch/`), each module with a `make_backend` factory
(engine/model_backend.py says what a backend is). `backend_named` imports the one `--backend`
names; the names themselves live with the setting (config/model_config.py: `BACKENDS`), so that
the flags name them without loading any backend's libraries."""

from __future__ import annotations

import importlib

from poolserve.config.model_config import BACKENDS
from poolserve.engine.model_backend import BackendFactory
from poolserve.errors import SettingError


def backend_named(name: str) -> BackendFactory:
    """The factory of the backend called `name`; an unknown name is a SettingError naming them."""
    module = BACKENDS.get(name)
    if module is None:
        raise SettingError(f"unknown --backend {name!r}; the backends: {', '.join(BACKENDS)}")
    factory: BackendFactory = importlib.import_module(module).make_backend
    return factory
