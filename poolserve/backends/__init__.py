"""The model backends by name (`--backend`): the module whose `make_backend` builds one.

A backend is one module and one line here. The names alone live here, without importing any
backend, so that the flags and the config can name them without loading a backend's libraries
(`engine/model_backend.py` imports the one asked for)."""

from __future__ import annotations

BACKENDS = {"torch": "poolserve.backends.torch.torch_backend"}
