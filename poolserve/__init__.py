"""poolserve: a serving engine for pooling models (embeddings, rerankers, classifiers, ...)."""

from poolserve.config import EngineConfig, ModelConfig, ServerConfig
from poolserve.offline import Engine

__version__ = "0.1.0"

__all__ = ["Engine", "EngineConfig", "ModelConfig", "ServerConfig", "__version__"]
