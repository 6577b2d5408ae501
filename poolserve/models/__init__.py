"""Loading pooling models: finding the directory, reading its layout, building the module."""

from poolserve.models.loader import LoadedModel, load_model

__all__ = ["LoadedModel", "load_model"]
