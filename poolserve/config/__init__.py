"""Configuration: frozen dataclasses shared by the commands, environment variables, model files and
Python. `ModelConfig` says what to load and how, `EngineConfig` how to batch and schedule,
`ServedModel` puts the two together with a model's names (a server may serve several),
`ServerConfig` how to serve over HTTP. Each setting is declared once, as a field that carries
its flag (`fields.py`); the commands' grammar is derived from them (`grammar.py`)."""

from poolserve.config.model_config import (
    COMPILE_MODES,
    LONG_INPUTS,
    CompileMode,
    DType,
    EngineConfig,
    LongInput,
    ModelConfig,
    ServedModel,
)
from poolserve.config.server_config import LOG_LEVELS, MIN_INPUT_TOKENS, ServerConfig

__all__ = [
    "COMPILE_MODES",
    "LOG_LEVELS",
    "LONG_INPUTS",
    "MIN_INPUT_TOKENS",
    "CompileMode",
    "DType",
    "EngineConfig",
    "LongInput",
    "ModelConfig",
    "ServedModel",
    "ServerConfig",
]
