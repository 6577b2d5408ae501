"""Loading pooling models: finding the directory, reading its layout, building the module."""

from poolserve.models.loader import EmbeddingModule, ModelSpec, load_module, prepare_model

__all__ = ["EmbeddingModule", "ModelSpec", "load_module", "prepare_model"]
