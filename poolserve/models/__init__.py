"""Loading pooling models: finding the directory, reading its layout, building the module."""

from poolserve.models.loader import ModelSpec, load_module, prepare_model
from poolserve.models.module import PoolingModule

__all__ = ["ModelSpec", "PoolingModule", "load_module", "prepare_model"]
