"""Several models behind one Python program: the Python API (`Engine`) of each model served by
a `ServiceRegistry` (one CPU pool for all of them, each model with its own scheduler and
runners; how the cores are shared: see service/registry.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from poolserve.service.registry import ServiceRegistry

if TYPE_CHECKING:
    from poolserve.offline.model_engine import Engine


class ModelSet(ServiceRegistry):
    """Loaded models by the names they are served under; thread-safe, close it when done.

    >>> with ModelSet.load("models.toml") as models:
    ...     vectors = models["minilm"].embed(["a sentence"])
    ...     scores = models["reranker"].score("a query", ["a document"])
    """

    def engine(self, name: str | None = None) -> Engine:
        """The Python API (`embed`, `score`, ...) of the model served as `name` (default: the
        first); it stays usable until this set is closed."""
        from poolserve.offline.model_engine import Engine

        service = self.first if name is None else self.find(name)
        config = self.config_of(service)
        return Engine.over(service, config.model, config.engine)

    def __getitem__(self, name: str) -> Engine:
        return self.engine(name)
