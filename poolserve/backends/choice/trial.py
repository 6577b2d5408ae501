"""One candidate of `--backend auto` tried: built as the backend that would serve it (its runtime
and precision forced), loaded and warmed up on the calling runner thread, its main head run over
real text shipped with the package by as many runners as the server has, all at once, each on
its own thread with its own forward (crew.py), and its outputs judged against torch float32's.

The objective is throughput: sentences of backends/calibration.txt (5-60 tokens, spread as the
file's are; how many a pass runs is trial_budget.py's) as requests of 32 waiting at once, in the
batches the engine's own scheduler forms from them for the runners (`drain`), taken by the
runners as each is free: so each runtime is timed as it would serve, in the batches it would
serve, packed ones for a backend that packs, length buckets for a padded one (measured: served,
torch packed about 60 sentences a batch where OpenVINO's buckets held 27, which batches of 32
for both do not show). Sentences per second, the median of timed passes (as many as the trial's
share of the budget holds, up to what `PASS_SECONDS` holds; one at least). 16 sentences of the
probe (backends/probe.txt) one at a time are timed too, on one runner, and shown, not chosen by.

A candidate slower than the fastest so far is told early (`Limits`): its first pass is stopped
once it has run `FIRST_PASS_CUT_OFF` times the fastest's timed pass (a first pass over new
shapes is slower than a steady one: OpenVINO's took 2.3x its steady time, so this bound is
wide; a precision the CPU only emulates runs 5x slower), and a first timed pass past `CUT_OFF`
times the fastest's ends its timing. Two within `NEAR` of each other are timed again in turn
(`duel`), so a sequential trial's noise does not decide. The judge is the quality gate int8
already has (backends/quality_gate.py: cosines for vectors, probabilities and labels for
scores), and for a float precision also precision.py's tolerance (a relative L2 distance of
0.045, a cosine of about 0.999), so a lower precision is held to what `--dtype auto` always held
it to.
"""

from __future__ import annotations

import importlib
import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from poolserve.backends import quality_gate
from poolserve.backends.choice.candidates import Candidate
from poolserve.backends.choice.crew import Crew
from poolserve.backends.choice.trial_budget import REQUEST_SENTENCES
from poolserve.backends.probe import calibration_texts, probe_texts
from poolserve.backends.torch.torch_backend import TorchBackend
from poolserve.backends.torch_model.precision import TOLERANCE, probe_batches, worst_error
from poolserve.config import EngineConfig
from poolserve.config.model_config import Quantize
from poolserve.config.runtime_table import RUNTIME_BY_NAME
from poolserve.engine.collate import Batch, text_item
from poolserve.engine.model_backend import Backend, Collate, RuntimeTrial
from poolserve.engine.scheduler import Scheduler
from poolserve.engine.stats import EngineStats
from poolserve.engine.work import RequestGroup
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)

TIMED_SENTENCES = 256
PASS_SECONDS = 1.5
MIN_PASSES = 2
MAX_PASSES = 9
SINGLE_SENTENCES = 16
CUT_OFF = 1.5
FIRST_PASS_CUT_OFF = 4.0
NEAR = 1.1
DUEL_PASSES = 5


def trial_texts() -> list[str]:
    """The trials' sentences: `TIMED_SENTENCES` of calibration.txt, every other one (the file
    is shuffled: any first part of them is spread as the whole is)."""
    texts = calibration_texts()
    return list(texts[:: len(texts) // TIMED_SENTENCES][:TIMED_SENTENCES])


@dataclass(frozen=True)
class Limits:
    """What ends a trial's passes early."""

    # A first pass still running past this many seconds is stopped (None: never): slower.
    first_pass: float | None = None
    # A first timed pass of more seconds than this ends the timing (None: never): slower.
    cut_off: float | None = None
    # More timed passes run while one more would end before this (a `time.perf_counter()`
    # time); one at least.
    until: float = math.inf
    # Whether to time it at all (the reference, where it is not a candidate, gives outputs).
    timed: bool = True


# Why a probe ended early: stopped in its first pass, its first timed pass past the cut-off, or
# not timed at all (the reference where it is not a candidate: its outputs alone).
Ended = Literal["first pass", "cut-off", "not timed"]


@dataclass(frozen=True)
class Probe:
    """The probe's outputs and timings on one backend, and what re-times it (`duel`)."""

    # Every text's output, in the texts' order (empty: stopped in its first pass).
    outputs: list[np.ndarray]
    sentences_per_second: float
    single_ms: float | None  # None: not timed
    # How long one timed pass took (the median of the timed ones), or the first pass.
    pass_seconds: float
    # Timed passes run (0: the first pass alone), and the sentences each ran.
    passes: int
    sentences: int
    # What times it again; None once let go (nothing may hold the model then).
    crew: Crew | None
    batches: Sequence[Batch]
    # Why it ended early (None: timed in full).
    ended: Ended | None = None


@dataclass(eq=False)
class Tried:
    """A candidate's trial: its row, and its backend where it loaded and passed (kept while it
    is the fastest so far, or near it: the winner serves without being loaded again), and how
    long the trial took."""

    candidate: Candidate
    trial: RuntimeTrial
    backend: Backend | None = None
    probe: Probe | None = None
    seconds: float = 0.0

    @staticmethod
    def left_out(candidate: Candidate, why: str, seconds: float = 0.0) -> Tried:
        row = RuntimeTrial(candidate.runtime, candidate.precision, None, None, {}, None, why)
        return Tried(candidate, row, seconds=seconds)

    @property
    def rate(self) -> float:
        return 0.0 if self.probe is None else self.probe.sentences_per_second

    def retimed(self, probe: Probe) -> None:
        """Its rate as `probe` (timed again) measured it."""
        self.probe = probe
        self.trial = replace(self.trial, sentences_per_second=probe.sentences_per_second)

    def release(self) -> None:
        """Its probe's runners let go (their forwards with them); its backend kept."""
        if self.probe is not None and self.probe.crew is not None:
            self.probe.crew.close()
            self.probe = replace(self.probe, crew=None, batches=())

    def settle(self, outcome: str) -> None:
        """Its outcome, and its backend closed and let go (it will not serve)."""
        self.trial = replace(self.trial, outcome=outcome)
        self.release()
        if self.backend is not None:
            self.backend.close()
            self.backend = None


def candidate_config(
    candidate: Candidate, config: EngineConfig, *, compiling: bool
) -> EngineConfig:
    """`config` with the candidate's runtime forced; torch runs what the compile cache holds
    (`compiling`: compiles as `config` asks), the graph runtimes compile their own graphs."""
    if candidate.runtime == "torch":
        compile = config.compile if compiling or config.compile == "off" else "cached"
    else:
        compile = "off"
    quantize: Quantize = "int8" if candidate.precision == "int8" else "off"
    return replace(config, backend=candidate.runtime, compile=compile, quantize=quantize)


def build(
    candidate: Candidate,
    spec: ModelSpec,
    config: EngineConfig,
    collate: Collate,
    *,
    ahead_of_time: bool = False,
) -> Backend:
    """The candidate's backend (not loaded): its factory refuses what it cannot run
    (`ahead_of_time`: for `poolserve compile`, torch builds what the compile cache lacks)."""
    dtype = "float32" if candidate.precision == "int8" else candidate.precision
    module = importlib.import_module(RUNTIME_BY_NAME[candidate.runtime].module)
    backend: Backend = module.make_backend(replace(spec, dtype=dtype), config, collate)
    if isinstance(backend, TorchBackend):
        backend.ahead_of_time = ahead_of_time
    return backend


def served_batches(
    spec: ModelSpec,
    collate: Collate,
    packed: bool,
    config: EngineConfig,
    runners: int,
    texts: Sequence[str],
) -> tuple[list[Batch], list[int]]:
    """`texts` batched as a loaded server batches them: requests of `REQUEST_SENTENCES` all
    waiting at once, in the batches the engine's scheduler forms for its free runners (its token
    budget and batch size; packed, or padded in length buckets, as the backend runs them); and
    where each of the batches' outputs goes in `texts`."""
    ids = TextTokenizer(spec.tokenizer).encode_batch(list(texts), truncate_to=spec.max_model_len)
    scheduler = Scheduler(
        max_batch_tokens=config.max_batch_tokens,
        max_batch_size=config.max_batch_size,
        window=config.schedule_window,
        stats=EngineStats(),
        bucket_padding_tokens=config.bucket_padding_tokens,
        packs=lambda head: packed,
    )
    head = spec.heads[0]
    starts: dict[int, int] = {}
    for start in range(0, len(ids), REQUEST_SENTENCES):
        chunk = ids[start : start + REQUEST_SENTENCES]
        group = RequestGroup(len(chunk))
        starts[id(group)] = start
        scheduler.submit(text_item(group, i, each, head=head) for i, each in enumerate(chunk))
    picked = scheduler.drain(runners)
    places = [starts[id(item.group)] + item.index for items in picked for item in items]
    return [collate(items, packed) for items in picked], places


def run_probe(
    backend: Backend,
    collate: Collate,
    config: EngineConfig,
    runners: int,
    threads: int,
    texts: Sequence[str],
    limits: Limits,
    sizing: Callable[[float], int] | None = None,
) -> Probe:
    """Load `backend` (on this thread), warm a runner's forward up and run `texts` in the
    batches `config`'s scheduler forms for `runners`: a first pass (its outputs), a settling
    one, then timed ones, as `limits` bound them. `sizing` (the reference's): how many of the
    texts the timed passes run, from the first pass's seconds (default: all)."""
    backend.load()
    forward = backend.executor()
    spec = backend.spec
    packed = spec.heads[0] in backend.packed_heads
    batches, places = served_batches(spec, collate, packed, config, runners, texts)
    singles = [
        batch
        for text in probe_texts()[:SINGLE_SENTENCES]
        for batch in probe_batches(spec, collate, packed=packed, texts=[text])
    ]
    crew = Crew(backend, forward, runners, threads)
    try:
        first = crew.first_pass(batches, limits.first_pass)
        if first.outputs is None:
            rate = first.made / first.seconds
            return Probe([], rate, None, first.seconds, 0, first.made, crew, batches, "first pass")
        # In the texts' order, whatever batches each runtime formed (the judge compares by place).
        outputs = [first.outputs[i] for i in sorted(range(len(places)), key=places.__getitem__)]
        count = len(texts) if sizing is None else sizing(first.seconds)
        if count < len(texts):
            batches, _ = served_batches(spec, collate, packed, config, runners, texts[:count])
        if not limits.timed:
            rate = len(texts) / first.seconds
            return Probe(outputs, rate, None, first.seconds, 0, count, crew, batches, "not timed")
        if runners > 1 or count < len(texts):
            crew.timed(batches)  # each runner has now run most of the timed batches' shapes
        timed = [crew.timed(batches)]
        if limits.cut_off is not None and timed[0] > limits.cut_off:
            rate = count / timed[0]
            return Probe(outputs, rate, None, timed[0], 1, count, crew, batches, "cut-off")
        most = max(MIN_PASSES, min(MAX_PASSES, int(PASS_SECONDS / max(timed[0], 1e-6))))
        while len(timed) < most and time.perf_counter() + statistics.median(timed) <= limits.until:
            timed.append(crew.timed(batches))
        seconds = statistics.median(timed)
        single = statistics.median(crew.single(batch) for batch in singles)
    except BaseException:
        crew.close()
        raise
    return Probe(outputs, count / seconds, single * 1000, seconds, len(timed), count, crew, batches)


def near(one: Probe, other: Probe) -> bool:
    """Whether the two are close enough that the order their trials ran in could flip them."""
    rates = sorted((one.sentences_per_second, other.sentences_per_second))
    return rates[1] <= NEAR * rates[0]


def duel(one: Probe, other: Probe, passes: int = DUEL_PASSES) -> tuple[Probe, Probe]:
    """Both timed again, a pass of each in turn (`passes` each): the same moments of the
    machine's noise fall on both. Their rates are those passes' medians."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(passes):
        for probe, seconds in zip((one, other), times, strict=True):
            assert probe.crew is not None  # both still loaded
            seconds.append(probe.crew.timed(probe.batches))
    return tuple(  # type: ignore[return-value]
        replace(
            probe,
            sentences_per_second=probe.sentences / statistics.median(seconds),
            pass_seconds=statistics.median(seconds),
            passes=probe.passes + passes,
        )
        for probe, seconds in zip((one, other), times, strict=True)
    )


def judge(
    candidate: Candidate, probe: Probe, reference: Sequence[np.ndarray], head: str
) -> tuple[dict[str, float], float, tuple[str, ...]]:
    """The gate's figures against the reference, the worst relative distance, and what falls
    short (empty: it passes)."""
    figures = quality_gate.figures(head, reference, probe.outputs)  # type: ignore[arg-type]
    error = worst_error(probe.outputs, reference)
    failures = quality_gate.failures(figures)
    if candidate.precision != "int8" and error > TOLERANCE:
        failures += (f"relative error {error:.4f} > {TOLERANCE}",)
    return figures, error, failures
