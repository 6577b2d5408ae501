"""poolserve: a serving engine for pooling models (embeddings, rerankers, classifiers, ...)."""

from poolserve._environment import apply_defaults

apply_defaults()

from poolserve.config import EngineConfig, ModelConfig, ServerConfig  # noqa: E402
from poolserve.offline import Engine  # noqa: E402

__version__ = "0.1.0"

__all__ = ["Engine", "EngineConfig", "ModelConfig", "ServerConfig", "__version__"]
