"""Configuration: frozen dataclasses shared by the commands, environment variables, model files and
Python. `ModelConfig` says what to load and how, `EngineConfig` how to batch and schedule,
`ServedModel` puts the two together with a model's names (a server may serve several),
`ServerConfig` how to serve over HTTP; `command_config.py` and `job_config.py` hold what the
commands take beside them. Each setting is declared once, as a field that carries its flag
(`fields.py`); the commands' grammar is made of them (`grammar.py`)."""

from poolserve.config.model_config import (
    CompileMode,
    DType,
    EngineConfig,
    LongInput,
    ModelConfig,
    ServedModel,
)
from poolserve.config.server_config import MIN_INPUT_TOKENS, ServerConfig

__all__ = [
    "MIN_INPUT_TOKENS",
    "CompileMode",
    "DType",
    "EngineConfig",
    "LongInput",
    "ModelConfig",
    "ServedModel",
    "ServerConfig",
]
