"""`--backend auto`: the engine and precision that run this model fastest on this machine,
chosen by measurement at its first start and read from the cache at later ones.

Each candidate (candidates.py) is built as the backend that would serve it and tried in turn
(trial.py), at most two loaded at once (the fastest so far and the one being tried); the first
is torch float32, the reference every other is judged against. The fastest that passes the
gate serves (a graph runtime's trial backend serves as it is; torch is loaded again to compile
as `--compile` asks). A first start spends at most `BUDGET_SECONDS` on the trials beyond the
reference (one whose time would run past it is left out, and said so); `poolserve compile`
measures without that bound and with torch compiled (`ahead_of_time`). A model whose weights
exceed `LARGE_MODEL_BYTES` is not measured: it runs on torch, as `--backend torch` would.
`--backend NAME` for an engine with several precisions narrows the candidates to that engine.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from poolserve._environment import cache_dir
from poolserve.backends.choice.candidates import REFERENCE, Candidate, Candidates, candidates
from poolserve.backends.choice.choice_cache import cached_choice, choice_file, save_choice
from poolserve.backends.choice.choice_table import describe, left_out_rows, refusal
from poolserve.backends.choice.trial import (
    Tried,
    build,
    candidate_config,
    duel,
    judge,
    near,
    run_probe,
)
from poolserve.backends.progress import progress
from poolserve.backends.torch.device import place
from poolserve.config import EngineConfig
from poolserve.engine.model_backend import (
    Backend,
    BackendFactory,
    Collate,
    CompileReport,
    EngineChoice,
    EngineTrial,
    Forward,
    PrecisionReport,
    QuantizationReport,
)
from poolserve.engine.runner_layout import runner_layout
from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)

BUDGET_SECONDS = 30.0
LARGE_MODEL_BYTES = 2 << 30


def make_backend(model: ModelSpec, config: EngineConfig, collate: Collate) -> Backend:
    """The backend that chooses among the candidates at load; where an engine was named and
    only one candidate is left, that candidate's backend itself."""
    placed = place(model)
    found = candidates(placed, config)
    if config.backend != "auto" and len(found.tried) <= 1:
        # The named engine's own factory builds it, or refuses what it cannot run in its words.
        only = found.tried[0] if found.tried else Candidate(config.backend, placed.dtype)
        return build(only, model, candidate_config(only, config, compiling=True), collate)
    if not found.tried:
        raise SettingError(refusal(config, found))
    return AutoBackend(placed, config, collate, found)


class AutoBackend:
    """The backend of the chosen candidate, which it hands every member of the backend
    protocol to once loaded."""

    def __init__(
        self, spec: ModelSpec, config: EngineConfig, collate: Collate, found: Candidates
    ) -> None:
        self._spec = spec
        self._config = config
        self._collate = collate
        self._found = found
        self._runners, threads = runner_layout(config, spec.device)
        self._threads = threads or 1
        self._chosen: Backend | None = None
        self.choice: EngineChoice | None = None
        # Set by `poolserve compile`: measure anew, torch compiled, with no time bound.
        self.ahead_of_time = False

    @property
    def spec(self) -> ModelSpec:
        return self._spec if self._chosen is None else self._chosen.spec

    @property
    def packed_heads(self) -> frozenset[Head]:
        return frozenset() if self._chosen is None else self._chosen.packed_heads

    @property
    def report(self) -> CompileReport:
        return CompileReport("eager") if self._chosen is None else self._chosen.report

    @property
    def precision(self) -> PrecisionReport | None:
        return None if self._chosen is None else self._chosen.precision

    @property
    def quantization(self) -> QuantizationReport | None:
        return None if self._chosen is None else self._chosen.quantization

    def load(self) -> None:
        started = time.perf_counter()
        tried = self._found.tried
        path = choice_file(cache_dir(), self._spec, self._config, self._found)
        cached = None if self.ahead_of_time else cached_choice(path)
        if cached is not None and Candidate(cached.engine, cached.precision) in tried:
            self.choice = cached
            self._chosen = self._serve(Candidate(cached.engine, cached.precision))
        elif len(tried) == 1 or _weights_bytes(self._spec.layout.directory) > LARGE_MODEL_BYTES:
            self._serve_unmeasured(started)
        else:
            self._measure(path, started)
        logger.info(describe(self._spec.name, self.choice))

    def _serve(self, candidate: Candidate, backend: Backend | None = None) -> Backend:
        """The candidate's backend loaded to serve (`backend`: its trial's, where it serves as
        it is)."""
        if backend is None:
            config = candidate_config(candidate, self._config, compiling=True)
            backend = build(candidate, self._spec, config, self._collate)
            backend.load()
        return backend

    def _serve_unmeasured(self, started: float) -> None:
        """One candidate, or a model too large to time in the budget: torch as `--backend
        torch` would run it (int8: the first engine that quantizes)."""
        tried = self._found.tried
        if len(tried) == 1 or self._config.quantize != "off":
            self._chosen = self._serve(tried[0])
            engine, dtype = tried[0].engine, tried[0].precision
        else:
            logger.info(
                "%s: its weights are over %d GiB, too large to time every engine at start-up: "
                "serving it on torch (`poolserve compile` measures them, or pass --backend)",
                self._spec.name,
                LARGE_MODEL_BYTES >> 30,
            )
            self._chosen = _torch_as_asked(self._spec, self._config, self._collate)
            self._chosen.load()
            engine, dtype = "torch", self._chosen.spec.dtype
        self.choice = EngineChoice(
            engine,
            dtype,
            left_out_rows(self._found),
            "only candidate",
            time.perf_counter() - started,
        )

    def _measure(self, path: Path, started: float) -> None:
        what = (
            f"{self._spec.name}: timing {', '.join(c.label for c in self._found.tried)} on "
            f"{self._threads} thread(s) to choose the fastest"
        )
        with progress(logger, what):
            rows, best = self._trials(started)
        seconds = time.perf_counter() - started  # the trials', not the winner's compile
        if best is None:
            failed = "; ".join(f"{row.candidate.label}: {row.trial.outcome}" for row in rows)
            raise ModelLoadError(f"{self._spec.name}: no engine could serve it ({failed})")
        winner = best.candidate
        best.release()  # the trial's helper runners; the server's runners make their own
        keep = winner.engine != "torch" or self._config.compile in ("off", "cached")
        if not keep and best.backend is not None:
            best.backend.close()
        self._chosen = self._serve(winner, best.backend if keep else None)
        trials = tuple(
            replace(row.trial, outcome="chosen") if row is best else row.trial for row in rows
        )
        self.choice = EngineChoice(
            winner.engine,
            winner.precision,
            trials + left_out_rows(self._found),
            "measured",
            seconds,
        )
        save_choice(path, self.choice)

    def _trials(self, started: float) -> tuple[list[Tried], Tried | None]:
        """Every candidate tried (the reference first), and the fastest that passed, its
        backend still loaded."""
        rows: list[Tried] = []
        best: Tried | None = None
        reference: list[np.ndarray] | None = None
        for candidate in [REFERENCE, *(c for c in self._found.tried if c != REFERENCE)]:
            if rows and self._past_budget(rows[0], started):
                why = f"not timed: past the {BUDGET_SECONDS:.0f} s a first start may measure for"
                rows.append(Tried.left_out(candidate, why))
                continue
            row = self._try(candidate, reference, best)
            rows.append(row)
            if reference is None:
                if row.probe is None:
                    raise ModelLoadError(
                        f"{self._spec.name}: torch float32, the reference every engine is "
                        f"judged against, failed to run ({row.trial.outcome})"
                    )
                reference = row.probe.outputs
            if candidate not in self._found.tried:
                row.settle("the reference (not a candidate)")
            elif row.backend is None or row.probe is None:
                continue
            elif best is None or best.probe is None:
                best = row
            elif row.probe.first_pass_only:
                times = row.probe.pass_seconds / best.probe.pass_seconds
                row.settle(f"slower (its first timed pass took {times:.1f}x the fastest's)")
            else:
                slower = "slower"
                if near(row.probe, best.probe):
                    retimed = duel(best.probe, row.probe)
                    best.retimed(retimed[0])
                    row.retimed(retimed[1])
                    slower = "slower, timed again in turn with {}"
                if row.rate > best.rate:
                    best.settle(slower.format(row.candidate.label))
                    best = row
                else:
                    row.settle(slower.format(best.candidate.label))
        return rows, best

    def _past_budget(self, first: Tried, started: float) -> bool:
        """Whether another trial, estimated to take as long as the first, would run past the
        budget (never for `poolserve compile`)."""
        elapsed = time.perf_counter() - started
        return not self.ahead_of_time and elapsed + first.seconds > BUDGET_SECONDS

    def _try(
        self, candidate: Candidate, reference: list[np.ndarray] | None, best: Tried | None
    ) -> Tried:
        """One trial: its row, its backend loaded where it passed the gate (`best`: the
        fastest so far, whose pass a slower one's first pass is cut off at)."""
        started = time.perf_counter()
        config = candidate_config(candidate, self._config, compiling=self.ahead_of_time)
        try:
            backend = build(candidate, self._spec, config, self._collate)
            fastest = None if best is None or best.probe is None else best.probe.pass_seconds
            probe = run_probe(
                backend, self._collate, self._config, self._runners, self._threads, fastest
            )
        except Exception as exc:  # a candidate that cannot load or export is left out
            why = exc.cli_message if isinstance(exc, SettingError) else str(exc) or repr(exc)
            logger.warning("%s: %s left out: %s", self._spec.name, candidate.label, why)
            return Tried.left_out(candidate, f"failed: {why}", time.perf_counter() - started)
        expected = probe.outputs if reference is None else reference
        figures, error, failures = judge(candidate, probe, expected, self._spec.heads[0])
        trial = EngineTrial(
            candidate.engine,
            candidate.precision,
            probe.sentences_per_second,
            probe.single_ms,
            figures,
            error,
            "passed" if not failures else f"off the gate: {'; '.join(failures)}",
        )
        tried = Tried(candidate, trial, backend, probe, time.perf_counter() - started)
        if failures:
            tried.settle(trial.outcome)
        return tried

    def executor(self) -> Forward:
        if self._chosen is None:
            raise RuntimeError("AutoBackend.executor() before load()")
        return self._chosen.executor()

    def close(self) -> None:
        if self._chosen is not None:
            self._chosen.close()


def _torch_as_asked(spec: ModelSpec, config: EngineConfig, collate: Collate) -> Backend:
    from poolserve.backends.torch.torch_backend import make_backend as torch_backend

    return torch_backend(spec, config, collate)


def _weights_bytes(directory: Path) -> int:
    return sum(
        path.stat().st_size
        for pattern in ("*.safetensors", "*.bin")
        for path in directory.rglob(pattern)
    )


# The engine's seam, checked by the type checker: this module's factory builds a `Backend`.
_FACTORY: BackendFactory = make_backend
