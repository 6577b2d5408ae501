"""What `--backend auto` may choose among for a model on this machine: each installed runtime
(config/runtime_table.py) in each precision both it and the CPU run well, or int8 with `--quantize
int8`, narrowed by what was asked for (`--dtype`, `--compile on`, a runtime named by
`--backend`), and what was left out with the reason (shown in the choice's table)."""

from __future__ import annotations

from dataclasses import dataclass

from poolserve.backends.torch_model.device import cpu_precisions, native_features
from poolserve.config import EngineConfig
from poolserve.config.runtime_table import RUNTIME_BY_NAME, RUNTIMES, RuntimeEntry
from poolserve.models.spec import ModelSpec


@dataclass(frozen=True)
class Candidate:
    """One runtime in one precision ("int8": quantized by that runtime, behind its gate)."""

    runtime: str
    precision: str

    @property
    def label(self) -> str:
        return f"{self.runtime} {self.precision}"


REFERENCE = Candidate("torch", "float32")


@dataclass(frozen=True)
class Candidates:
    """What to try, in the order tried, and what was left out, each with why. torch float32
    comes first (the reference every other is judged against), then the lower precisions (where
    the CPU runs one well, it is usually the fastest: timed before the budget can run out),
    then float32 on the other runtimes."""

    tried: tuple[Candidate, ...]
    left_out: tuple[tuple[Candidate, str], ...]


def runtimes_asked(config: EngineConfig) -> tuple[RuntimeEntry, ...]:
    """`--backend auto`: every runtime; a named one: that one alone."""
    return RUNTIMES if config.backend == "auto" else (RUNTIME_BY_NAME[config.backend],)


def candidates(spec: ModelSpec, config: EngineConfig) -> Candidates:
    """The candidates for `spec` (placed: its device chosen, its dtype as asked) under
    `config`."""
    tried: list[Candidate] = []
    left_out: list[tuple[Candidate, str]] = []
    precisions = _precisions(spec, config)
    for entry in runtimes_asked(config):
        why_not_runtime = _why_not(entry, spec, config)
        for precision in precisions:
            candidate = Candidate(entry.name, precision)
            runs = entry.int8 if precision == "int8" else precision in entry.precisions
            if not runs:
                continue
            why = why_not_runtime or _why_not_precision(candidate, spec)
            if why is not None:
                left_out.append((candidate, why))
            else:
                tried.append(candidate)
    tried.sort(key=lambda candidate: (candidate != REFERENCE, candidate.precision == "float32"))
    return Candidates(tuple(tried), tuple(left_out))


def _precisions(spec: ModelSpec, config: EngineConfig) -> tuple[str, ...]:
    """int8 with `--quantize int8`; else the dtype asked, or (auto) each the device runs well."""
    if config.quantize == "int8":
        return ("int8",)
    if spec.dtype != "auto":
        return (spec.dtype,)
    return cpu_precisions()


def emulated(candidate: Candidate | None, spec: ModelSpec) -> bool:
    """Whether the CPU only emulates the candidate's precision (torch runs it, slowly)."""
    return (
        candidate is not None
        and spec.device == "cpu"
        and candidate.precision not in ("float32", "int8")
        and candidate.precision not in cpu_precisions()
    )


def _why_not_precision(candidate: Candidate, spec: ModelSpec) -> str | None:
    """Why a graph runtime cannot run the candidate's precision here (None: it can): they run
    a lower precision only where the CPU runs it natively (torch emulates it, and says what it
    costs)."""
    if candidate.runtime == "torch" or not emulated(candidate, spec):
        return None
    return (
        f"runs {candidate.precision} only on a CPU that runs it natively "
        f"({native_features(candidate.precision)}), and this one does not"
    )


def _why_not(entry: RuntimeEntry, spec: ModelSpec, config: EngineConfig) -> str | None:
    """Why `entry` cannot run `spec` here (None: it can)."""
    if spec.device != "cpu" and not entry.cuda:
        return f"runs on the CPU, and the model is on {spec.device}"
    if spec.layout.vision is not None and not entry.images:
        return "serves text models only"
    if config.compile == "on" and entry.name != "torch":
        return "--compile on compiles torch"
    if not entry.installed():
        return f"not installed (pip install 'poolserve[{entry.extra}]')"
    return None
