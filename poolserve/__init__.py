"""poolserve: a serving engine for pooling models (embeddings, rerankers, classifiers, ...)."""

from typing import TYPE_CHECKING, Any

from poolserve._environment import apply_defaults

apply_defaults()

from poolserve.config import EngineConfig, ModelConfig, ServerConfig  # noqa: E402

if TYPE_CHECKING:
    from poolserve.offline import Engine

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """`Engine` is imported on first use: it brings torch (seconds), which `poolserve --version`
    or a server that cannot listen never need."""
    if name == "Engine":
        from poolserve.offline import Engine

        return Engine
    raise AttributeError(f"module 'poolserve' has no attribute {name!r}")


__all__ = ["Engine", "EngineConfig", "ModelConfig", "ServerConfig", "__version__"]
