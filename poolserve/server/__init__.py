"""The HTTP layer: a thin async adapter over the engine and the task processors."""

from poolserve.server.app import create_app

__all__ = ["create_app"]
