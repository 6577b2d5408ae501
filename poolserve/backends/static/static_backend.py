"""The static runtime (engine/model_backend.py's `Backend`): a static model's table looked up
for a whole flat batch (engine/collate.py's `collate_flat`) on the runner's thread. Nothing is
chosen, measured or compiled: the settings that choose, compile or quantize an engine do not
apply, and one that asks for something else is refused in one line."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from poolserve.backends.static.lookup import LoadedTable
from poolserve.config import EngineConfig
from poolserve.engine.collate import Batch
from poolserve.engine.model_backend import (
    Collate,
    CompileReport,
    Forward,
    PrecisionReport,
    QuantizationReport,
    RuntimeChoice,
)
from poolserve.errors import SettingError
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)


def check_static_settings(spec: ModelSpec, config: EngineConfig) -> None:
    """Refuse (SettingError, one line) what a static model cannot be served with."""
    static = spec.layout.static
    assert static is not None
    what = f"{spec.name} is a static embedding model (a table looked up in numpy)"
    refusals = {
        # torch: the Python API's default (and what --batch-invariant sets).
        f"--backend {config.backend}": config.backend not in ("auto", "torch"),
        f"--quantize {config.quantize}": config.quantize != "off",
        f"--quantize-gate {config.quantize_gate}": config.quantize_gate != "refuse",
        "--compile on": config.compile == "on",
        f"--torch-threads {config.torch_threads}": config.torch_threads is not None,
        f"--attention {spec.attention}": spec.attention != "auto",
        f"--device {spec.device}": spec.device not in ("auto", "cpu"),
        f"--dtype {spec.dtype}": spec.dtype not in ("auto", "float32"),
    }
    for setting, refused in refusals.items():
        if refused:
            raise SettingError(
                f"{what}: {setting} does not apply (its table is {static.dtype}, its means "
                "float32, on the CPU); leave it out"
            )


class StaticBackend:
    def __init__(self, spec: ModelSpec, config: EngineConfig, collate: Collate) -> None:
        check_static_settings(spec, config)
        static = spec.layout.static
        assert static is not None
        self._static = static
        self._spec = replace(spec, device="cpu", dtype=static.dtype)
        self._table: LoadedTable | None = None

    @property
    def spec(self) -> ModelSpec:
        return self._spec

    @property
    def packed_heads(self) -> frozenset[Head]:
        """Every head: a flat batch holds its texts' tokens end to end, with no padding, as a
        packed one does (the scheduler then fills a batch in order, not by length)."""
        return frozenset(self._spec.heads)

    @property
    def report(self) -> CompileReport:
        return CompileReport("table")

    @property
    def precision(self) -> PrecisionReport | None:
        return None

    @property
    def quantization(self) -> QuantizationReport | None:
        return None

    @property
    def choice(self) -> RuntimeChoice | None:
        return None

    def load(self) -> None:
        started = time.perf_counter()
        self._table = LoadedTable.load(self._static)
        static = self._static
        logger.info(
            "%s: a static model (%s rules): %d × %d %s table%s, memory-mapped in %.0f ms",
            self._spec.name,
            static.library,
            static.rows,
            static.dim,
            static.dtype,
            ", vocabulary-quantized" if static.mapping else "",
            (time.perf_counter() - started) * 1000,
        )

    def executor(self) -> Forward:
        table = self._table
        assert table is not None, "load() first"

        def forward(batch: Batch, threads: int) -> Sequence[np.ndarray]:
            assert batch.lengths is not None, "a static model runs flat batches"
            if batch.head == "token_embed":
                return table.token_vectors(batch.input_ids, batch.lengths)
            return list(table.means(batch.input_ids, batch.lengths))

        return forward

    def close(self) -> None:
        self._table = None


def make_backend(spec: ModelSpec, config: EngineConfig, collate: Collate) -> StaticBackend:
    return StaticBackend(spec, config, collate)
