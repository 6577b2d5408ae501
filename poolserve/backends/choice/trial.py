"""One candidate of `--backend auto` tried: built as the backend that would serve it (its engine
and precision forced), loaded and warmed up on the calling runner thread, its main head run over
real text shipped with the package by as many runners as the server has, all at once, each on
its own thread with its own forward (crew.py), and its outputs judged against torch float32's.

The objective is throughput: `TIMED_SENTENCES` sentences of backends/calibration.txt (5-60
tokens, every other one, so their lengths spread as the file's do) as requests of 32 waiting at
once, in the batches the engine's own scheduler forms from them for the runners (`drain`),
taken by the runners as each is free: so each engine is timed as it would serve, in the batches
it would serve, packed ones for a backend that packs, length buckets for a padded one
(measured: served, torch packed about 60 sentences a batch where OpenVINO's buckets held 27,
which batches of 32 for both do not show). Sentences per second, the median of timed passes (as
many as fit in `PASS_SECONDS`, at least `MIN_PASSES`). 16 sentences of the probe
(backends/probe.txt) one at a time are timed too, on one runner, and shown, not chosen by. A
candidate whose first timed pass takes `CUT_OFF` times the fastest's pass is slower, and is not
timed further (the warm-up passes cannot tell: a graph runtime's first pass over new shapes can
take twice its steady time, OpenVINO's does). Two within `NEAR` of each other are timed again
in turn (`duel`), so a sequential trial's noise does not decide. The judge is the quality gate
int8 already has (backends/quality_gate.py: cosines for vectors, probabilities and labels for
scores), and for a float precision also precision.py's tolerance (a relative L2 distance of
0.045, a cosine of about 0.999), so a lower precision is held to what `--dtype auto` always held
it to.
"""

from __future__ import annotations

import importlib
import logging
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from poolserve.backends import quality_gate
from poolserve.backends.choice.candidates import Candidate
from poolserve.backends.choice.crew import Crew
from poolserve.backends.probe import calibration_texts, probe_texts
from poolserve.backends.torch.precision import TOLERANCE, probe_batches, worst_error
from poolserve.config import EngineConfig
from poolserve.config.engine_table import ENGINE_BY_NAME
from poolserve.config.model_config import Quantize
from poolserve.engine.collate import Batch, text_item
from poolserve.engine.model_backend import Backend, Collate, EngineTrial
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
REQUEST_SENTENCES = 32
CUT_OFF = 1.5
NEAR = 1.1
DUEL_PASSES = 5


@dataclass(frozen=True)
class Probe:
    """The probe's outputs and timings on one backend, and what re-times it (`duel`)."""

    outputs: list[np.ndarray]
    sentences_per_second: float
    single_ms: float | None  # None: not timed (its first timed pass was past the cut-off)
    # How long one pass of the batches took (the median of the timed ones, or the one).
    pass_seconds: float
    # What times it again; None once let go (nothing may hold the model then).
    crew: Crew | None
    batches: Sequence[Batch]

    @property
    def first_pass_only(self) -> bool:
        return self.single_ms is None


@dataclass
class Tried:
    """A candidate's trial: its row, and its backend where it loaded and passed (kept while it
    is the fastest so far: the winner serves without being loaded again), and how long the
    trial took (the next ones' time is estimated from the first's)."""

    candidate: Candidate
    trial: EngineTrial
    backend: Backend | None = None
    probe: Probe | None = None
    seconds: float = 0.0

    @staticmethod
    def left_out(candidate: Candidate, why: str, seconds: float = 0.0) -> Tried:
        row = EngineTrial(candidate.engine, candidate.precision, None, None, {}, None, why)
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
    """`config` with the candidate's engine forced; torch runs what the compile cache holds
    (`compiling`: compiles as `config` asks), the graph runtimes compile their own graphs."""
    if candidate.engine == "torch":
        compile = config.compile if compiling or config.compile == "off" else "cached"
    else:
        compile = "off"
    quantize: Quantize = "int8" if candidate.precision == "int8" else "off"
    return replace(config, backend=candidate.engine, compile=compile, quantize=quantize)


def build(candidate: Candidate, spec: ModelSpec, config: EngineConfig, collate: Collate) -> Backend:
    """The candidate's backend (not loaded): its factory refuses what it cannot run."""
    dtype = "float32" if candidate.precision == "int8" else candidate.precision
    module = importlib.import_module(ENGINE_BY_NAME[candidate.engine].module)
    backend: Backend = module.make_backend(replace(spec, dtype=dtype), config, collate)
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
    fastest: float | None = None,
) -> Probe:
    """Load `backend` (on this thread), warm a runner's forward up and run the probe in the
    batches `config`'s scheduler forms for `runners` (`fastest`: the fastest pass so far, in
    seconds; a first timed pass past `CUT_OFF` times it ends the probe there)."""
    backend.load()
    forward = backend.executor()
    spec = backend.spec
    packed = spec.heads[0] in backend.packed_heads
    texts = calibration_texts()[:: len(calibration_texts()) // TIMED_SENTENCES]
    batches, places = served_batches(
        spec, collate, packed, config, runners, texts[:TIMED_SENTENCES]
    )
    singles = [
        batch
        for text in probe_texts()[:SINGLE_SENTENCES]
        for batch in probe_batches(spec, collate, packed=packed, texts=[text])
    ]
    crew = Crew(backend, forward, runners, threads)
    try:
        started = time.perf_counter()
        produced = crew.outputs(batches)  # the warm-up pass
        first = time.perf_counter() - started
        if runners > 1:
            crew.timed(batches)  # each runner has now run most of the batches' shapes
        # In the texts' order, whatever batches each engine formed (the judge compares by place).
        outputs = [produced[i] for i in sorted(range(len(places)), key=places.__getitem__)]
        timed = [crew.timed(batches)]
        if fastest is not None and timed[0] > CUT_OFF * fastest:
            return Probe(outputs, len(outputs) / timed[0], None, timed[0], crew, batches)
        passes = max(MIN_PASSES, min(MAX_PASSES, int(PASS_SECONDS / max(first, 1e-6))))
        timed += [crew.timed(batches) for _ in range(passes - 1)]
        seconds = statistics.median(timed)
        single = statistics.median(crew.single(batch) for batch in singles)
    except BaseException:
        crew.close()
        raise
    return Probe(outputs, len(outputs) / seconds, single * 1000, seconds, crew, batches)


def near(one: Probe, other: Probe) -> bool:
    """Whether the two are close enough that the order their trials ran in could flip them."""
    rates = sorted((one.sentences_per_second, other.sentences_per_second))
    return rates[1] <= NEAR * rates[0]


def duel(one: Probe, other: Probe) -> tuple[Probe, Probe]:
    """Both timed again, a pass of each in turn (`DUEL_PASSES` each): the same moments of the
    machine's noise fall on both. Their rates are those passes' medians."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(DUEL_PASSES):
        for probe, seconds in zip((one, other), times, strict=True):
            assert probe.crew is not None  # both still loaded
            seconds.append(probe.crew.timed(probe.batches))
    return tuple(  # type: ignore[return-value]
        replace(
            probe,
            sentences_per_second=len(probe.outputs) / statistics.median(seconds),
            pass_seconds=statistics.median(seconds),
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
