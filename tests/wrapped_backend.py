"""A model backend that wraps another, handing every member of the engine's backend protocol
(poolserve/engine/model_backend.py) to it: the base of the tests' backends that inject faults
or signal what ran through the seam."""

from __future__ import annotations

from typing import Any

from poolserve.engine.model_backend import (
    Backend,
    CompileReport,
    Forward,
    PrecisionReport,
    QuantizationReport,
    RuntimeChoice,
)
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec


class WrappedBackend:
    def __init__(self, inner: Backend) -> None:
        self.inner = inner

    @property
    def spec(self) -> ModelSpec:
        return self.inner.spec

    @property
    def packed_heads(self) -> frozenset[Head]:
        return self.inner.packed_heads

    @property
    def report(self) -> CompileReport:
        return self.inner.report

    @property
    def precision(self) -> PrecisionReport | None:
        return self.inner.precision

    @property
    def quantization(self) -> QuantizationReport | None:
        return self.inner.quantization

    @property
    def choice(self) -> RuntimeChoice | None:
        return self.inner.choice

    def load(self) -> None:
        self.inner.load()

    def executor(self) -> Forward:
        return self.inner.executor()

    def close(self) -> None:
        self.inner.close()


def wrapping(cls: type[WrappedBackend], *extra: Any) -> Any:
    """A `BackendFactory`: the real torch backend, wrapped in `cls(backend, *extra)`."""
    from poolserve.backends.torch.torch_backend import make_backend

    return lambda *args: cls(make_backend(*args), *extra)
