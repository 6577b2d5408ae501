"""`--backend auto`: the runtime and precision that run this model fastest on this machine, chosen
by measurement at its first start and read from the cache at later ones.

Every candidate (candidates.py) is timed at a first start, on any CPU, the trials sharing
`trial_budget.BUDGET_SECONDS` by running shorter passes on a slower (or busier) machine rather than
leaving candidates out (trial_round.py, trial_budget.py). The fastest that passes the gate serves as
its trial loaded it: a start never waits for a compile (torch serves its compiled forward where
`poolserve compile` built it and measured it faster, else eagerly). `poolserve compile` measures
without the bound, torch compiled (`ahead_of_time`). A model whose weights exceed
`LARGE_MODEL_BYTES` is not measured: it runs on torch, as `--backend torch` would. `--backend NAME`
for a runtime with several precisions narrows the candidates to that runtime. A precision the CPU
only emulates (`--dtype bfloat16` without AVX512-BF16 or AMX) is served as asked, after a short
trial beside float32 whose cost the log tells.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

from poolserve._environment import cache_dir
from poolserve.backends.choice.candidates import Candidate, Candidates, candidates, emulated
from poolserve.backends.choice.choice_cache import cached_choice, choice_file, save_choice
from poolserve.backends.choice.choice_table import describe, emulation_line, left_out_rows, refusal
from poolserve.backends.choice.trial import build, candidate_config
from poolserve.backends.choice.trial_budget import TrialBudget
from poolserve.backends.choice.trial_round import TrialRound
from poolserve.backends.progress import progress
from poolserve.backends.torch_model.device import place
from poolserve.config import EngineConfig
from poolserve.engine.model_backend import (
    Backend,
    BackendFactory,
    Collate,
    CompileReport,
    Forward,
    PrecisionReport,
    QuantizationReport,
    RuntimeChoice,
)
from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)

LARGE_MODEL_BYTES = 2 << 30


def make_backend(model: ModelSpec, config: EngineConfig, collate: Collate) -> Backend:
    """The backend that chooses among the candidates at load; where a runtime was named and
    only one candidate is left, that candidate's backend itself (but for a precision the CPU
    only emulates, whose cost is measured first)."""
    placed = place(model)
    found = candidates(placed, config)
    lone = found.tried[0] if len(found.tried) == 1 else None
    if config.backend != "auto" and len(found.tried) <= 1 and not emulated(lone, placed):
        # The named runtime's own factory builds it, or refuses what it cannot run in its words.
        only = lone or Candidate(config.backend, placed.dtype)
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
        self._chosen: Backend | None = None
        self.choice: RuntimeChoice | None = None
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
        lone_emulated = len(tried) == 1 and emulated(tried[0], self._spec)
        if cached is not None and Candidate(cached.runtime, cached.precision) in tried:
            self.choice = cached
            self._chosen = self._serve(Candidate(cached.runtime, cached.precision))
        elif lone_emulated:
            self._measure(path, started, TrialBudget(started, 0.0))
        elif len(tried) == 1 or _weights_bytes(self._spec.layout.directory) > LARGE_MODEL_BYTES:
            self._serve_unmeasured(started)
        else:
            budget = TrialBudget.unbounded() if self.ahead_of_time else TrialBudget(started)
            self._measure(path, started, budget)
        logger.info(describe(self._spec.name, self.choice))
        if self.choice is not None and emulated(
            Candidate(self.choice.runtime, self.choice.precision), self._spec
        ):
            logger.warning(emulation_line(self._spec.name, self.choice))

    def _serve(self, candidate: Candidate) -> Backend:
        """The candidate's backend, loaded to serve."""
        config = candidate_config(candidate, self._config, compiling=True)
        backend = build(candidate, self._spec, config, self._collate)
        backend.load()
        return backend

    def _serve_unmeasured(self, started: float) -> None:
        """One candidate, or a model too large to time in the budget: torch as `--backend
        torch` would run it (int8: the first runtime that quantizes)."""
        tried = self._found.tried
        if len(tried) == 1 or self._config.quantize != "off":
            self._chosen = self._serve(tried[0])
            runtime, dtype = tried[0].runtime, tried[0].precision
        else:
            logger.info(
                "%s: its weights are over %d GiB, too large to time every engine at start-up: "
                "serving it on torch (`poolserve compile` measures them, or pass --backend)",
                self._spec.name,
                LARGE_MODEL_BYTES >> 30,
            )
            self._chosen = _torch_as_asked(self._spec, self._config, self._collate)
            self._chosen.load()
            runtime, dtype = "torch", self._chosen.spec.dtype
        self.choice = RuntimeChoice(
            runtime,
            dtype,
            left_out_rows(self._found),
            "only candidate",
            time.perf_counter() - started,
        )

    def _measure(self, path: Path, started: float, budget: TrialBudget) -> None:
        rounds = TrialRound(
            self._spec, self._config, self._collate, self._found, ahead_of_time=self.ahead_of_time
        )
        labels = ", ".join(c.label for c in self._found.tried)
        why = "to tell what it costs" if len(self._found.tried) == 1 else "to choose the fastest"
        what = f"{self._spec.name}: timing {labels} on {rounds.layout} {why}"
        with progress(logger, what):
            rows, best = rounds.run(budget)
        seconds = time.perf_counter() - started
        if best is None or best.backend is None:
            failed = "; ".join(f"{row.candidate.label}: {row.trial.outcome}" for row in rows)
            raise ModelLoadError(f"{self._spec.name}: no engine could serve it ({failed})")
        best.release()  # the trial's helper runners; the server's runners make their own
        winner = best.candidate
        # The winner serves as its trial loaded it (torch: compiled where the cache held it),
        # but where the trial ran what the cache held and `--compile on` asks for a compile.
        compiles = candidate_config(winner, self._config, compiling=True).compile == "on"
        if compiles and not self.ahead_of_time:
            best.backend.close()
            self._chosen = self._serve(winner)
        else:
            self._chosen = best.backend
        trials = tuple(
            replace(row.trial, outcome="chosen") if row is best else row.trial for row in rows
        )
        self.choice = RuntimeChoice(
            winner.runtime,
            winner.precision,
            trials + left_out_rows(self._found),
            "measured",
            seconds,
        )
        save_choice(path, self.choice)

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


# The backend seam, checked by the type checker: this module's factory builds a `Backend`.
_FACTORY: BackendFactory = make_backend
