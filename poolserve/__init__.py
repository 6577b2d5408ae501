"""poolserve: a serving engine for pooling models (embeddings, rerankers, classifiers, ...)."""

from typing import TYPE_CHECKING, Any

from poolserve._environment import apply_defaults

apply_defaults()

from poolserve._version import __version__  # noqa: E402
from poolserve.config import EngineConfig, ModelConfig, ServedModel, ServerConfig  # noqa: E402
from poolserve.tasks.chunking import Chunking  # noqa: E402

if TYPE_CHECKING:
    from poolserve.offline.model_engine import Engine
    from poolserve.offline.model_set import ModelSet


def __getattr__(name: str) -> Any:
    """`Engine` and `ModelSet` are imported on first use: they bring torch (seconds), which
    `poolserve --version` or a server that cannot listen never need."""
    if name == "Engine":
        from poolserve.offline.model_engine import Engine

        return Engine
    if name == "ModelSet":
        from poolserve.offline.model_set import ModelSet

        return ModelSet
    raise AttributeError(f"module 'poolserve' has no attribute {name!r}")


__all__ = [
    "Chunking",
    "Engine",
    "EngineConfig",
    "ModelConfig",
    "ModelSet",
    "ServedModel",
    "ServerConfig",
    "__version__",
]
