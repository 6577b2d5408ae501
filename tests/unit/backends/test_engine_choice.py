"""`--backend auto`: the candidates the machine and the flags allow, the fastest that passes the
gate chosen (a failing engine and one off the gate left out, with why), every candidate timed
however slow the machine (the budget shortens the passes), a precision the CPU only emulates
served with its measured cost, the choice cached and read at the next start, and on a real tiny
model every candidate run and its answers served.

Which precisions a CPU runs natively decides the candidates: the tests of that logic say which
CPU they assume (its flags, patched) and cover each kind, so they pass on any CPU; the test on
the real tiny model asserts what this CPU's own candidates do."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve import Engine, EngineConfig, ModelConfig
from poolserve.backends.choice import (
    auto_backend,
    candidates,
    crew,
    trial,
    trial_budget,
    trial_round,
)
from poolserve.backends.choice.auto_backend import AutoBackend
from poolserve.backends.choice.candidates import Candidate
from poolserve.backends.choice.choice_cache import cached_choice, choice_file
from poolserve.backends.choice.crew import Crew
from poolserve.backends.choice.trial import Probe
from poolserve.backends.torch_model import device
from poolserve.backends.torch_model.device import place
from poolserve.engine.collate import Batch
from poolserve.engine.model_backend import CompileReport
from poolserve.engine.model_inputs import collate_for
from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.describe import prepare_model
from poolserve.models.spec import ModelSpec

REFERENCE = [np.array([1.0, 0.0, 0.0]), np.array([0.0, 2.0, 1.0])]
FLOAT32_ELSEWHERE = ["onnxruntime float32", "openvino float32"]
# The kinds of CPU the project runs on, by the flags that decide the precisions.
AVX2 = frozenset({"avx", "avx2", "fma"})
AVX512_BF16 = AVX2 | {"avx512f", "avx512_bf16"}
AMX = AVX512_BF16 | {"amx_tile", "amx_bf16", "amx_fp16"}


def on_cpu(monkeypatch: pytest.MonkeyPatch, flags: frozenset[str]) -> None:
    """Everything that asks which precisions the CPU runs reads these flags."""
    monkeypatch.setattr(device, "cpu_flags", lambda: flags)


def bundled(dtype: str = "auto") -> ModelSpec:
    return place(dataclasses.replace(prepare_model(ModelConfig()), dtype=dtype))


@pytest.fixture
def spec(monkeypatch: pytest.MonkeyPatch) -> ModelSpec:
    """The bundled model on a CPU that runs float32 and bf16 natively, every engine installed."""
    on_cpu(monkeypatch, AVX512_BF16)
    return bundled()


def labels(spec: ModelSpec, **config: Any) -> list[str]:
    found = candidates.candidates(spec, EngineConfig(backend="auto", **config))
    return [candidate.label for candidate in found.tried]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (AVX2, ["torch float32", *FLOAT32_ELSEWHERE]),
        (
            AVX512_BF16,
            ["torch float32", "torch bfloat16", "openvino bfloat16", *FLOAT32_ELSEWHERE],
        ),
        (
            AMX,
            [
                "torch float32",
                "torch bfloat16",
                "torch float16",
                "openvino bfloat16",
                *FLOAT32_ELSEWHERE,
            ],
        ),
    ],
    ids=["avx2", "avx512-bf16", "amx"],
)
def test_the_candidates_are_each_engine_in_each_precision_the_cpu_runs_natively(
    monkeypatch: pytest.MonkeyPatch, flags: frozenset[str], expected: list[str]
) -> None:
    on_cpu(monkeypatch, flags)
    # The reference first, then the lower precisions, then float32 on the other engines.
    assert labels(bundled()) == expected


def test_the_candidates_are_narrowed_by_the_flags(spec: ModelSpec) -> None:
    assert labels(dataclasses.replace(spec, dtype="float32")) == [
        "torch float32",
        "onnxruntime float32",
        "openvino float32",
    ]
    assert labels(spec, quantize="int8") == ["onnxruntime int8", "openvino int8"]
    assert labels(spec, compile="on") == ["torch float32", "torch bfloat16"]
    named = candidates.candidates(spec, EngineConfig(backend="openvino"))
    assert [c.label for c in named.tried] == ["openvino bfloat16", "openvino float32"]
    on_cuda = candidates.candidates(
        dataclasses.replace(spec, device="cuda", dtype="bfloat16"), EngineConfig(backend="auto")
    )
    assert [c.label for c in on_cuda.tried] == ["torch bfloat16"]
    assert dict(on_cuda.left_out)[Candidate("openvino", "bfloat16")].startswith("runs on the CPU")


def test_a_precision_the_cpu_emulates_is_torch_s_alone_and_the_graph_runtimes_say_why_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on_cpu(monkeypatch, AVX2)
    found = candidates.candidates(bundled("bfloat16"), EngineConfig(backend="auto"))
    assert [c.label for c in found.tried] == ["torch bfloat16"]
    assert candidates.emulated(found.tried[0], bundled("bfloat16"))
    assert dict(found.left_out)[Candidate("openvino", "bfloat16")] == (
        "runs bfloat16 only on a CPU that runs it natively (AVX512-BF16 or AMX), and this one "
        "does not"
    )
    on_cpu(monkeypatch, AVX512_BF16)
    assert not candidates.emulated(Candidate("torch", "bfloat16"), bundled("bfloat16"))
    assert candidates.emulated(Candidate("torch", "float16"), bundled("float16"))


class Fake:
    """A candidate's backend whose probe the test decides."""

    def __init__(self, candidate: Candidate, spec: ModelSpec) -> None:
        self.candidate = candidate
        self.spec = dataclasses.replace(spec, dtype=candidate.precision)
        self.packed_heads: frozenset[str] = frozenset()
        self.report = CompileReport("eager")
        self.precision = self.quantization = self.choice = None
        self.loaded = self.closed = False
        self.config: EngineConfig | None = None  # what it was built with

    def load(self) -> None:
        self.loaded = True

    def executor(self) -> Any:
        return lambda batch, threads: []

    def close(self) -> None:
        self.closed = True


def faked(
    monkeypatch: pytest.MonkeyPatch, rates: dict[str, tuple[float, float] | Exception]
) -> list[Fake]:
    """Each candidate's backend a Fake whose probe runs at the given rate, its outputs off
    float32's by the given relative error (or whose load raises)."""
    built: list[Fake] = []

    def build(candidate: Candidate, spec: ModelSpec, config: Any, collate: Any, **_: Any) -> Fake:
        outcome = rates[candidate.label]
        if isinstance(outcome, Exception):
            raise outcome
        built.append(Fake(candidate, spec))
        built[-1].config = config
        return built[-1]

    def run_probe(backend: Fake, *args: Any) -> Probe:
        rate, error = rates[backend.candidate.label]  # type: ignore[misc]
        outputs = [vector * (1 + error) for vector in REFERENCE]
        one_runner = Crew(backend, backend.executor(), 1, 1)  # type: ignore[arg-type]
        return Probe(outputs, rate, 1.0, len(outputs) / rate, 3, len(outputs), one_runner, [])

    for module in (auto_backend, trial_round):  # a restart's build, and the trials'
        monkeypatch.setattr(module, "build", build)
    monkeypatch.setattr(trial_round, "run_probe", run_probe)
    return built


def choose(spec: ModelSpec, **config: Any) -> AutoBackend:
    backend = auto_backend.make_backend(
        spec, EngineConfig(backend="auto", **config), collate_for(spec)
    )
    assert isinstance(backend, AutoBackend)
    backend.load()
    return backend


def test_the_fastest_within_the_gate_serves_and_the_others_say_why_not(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path))
    built = faked(
        monkeypatch,
        {
            "torch float32": (100.0, 0.0),
            "torch bfloat16": (300.0, 0.01),
            "onnxruntime float32": ModelLoadError("the exporter broke"),
            "openvino float32": (150.0, 0.0),
            "openvino bfloat16": (900.0, 0.2),  # the fastest, but far off float32
        },
    )
    backend = choose(spec)
    choice = backend.choice
    assert choice is not None and choice.source == "measured"
    assert (choice.runtime, choice.precision) == ("torch", "bfloat16")
    outcomes = {f"{t.runtime} {t.precision}": t.outcome for t in choice.trials}
    assert outcomes["torch float32"] == "slower than torch bfloat16"
    assert outcomes["torch bfloat16"] == "chosen"
    assert outcomes["onnxruntime float32"] == "failed: the exporter broke"
    assert outcomes["openvino float32"] == "slower than torch bfloat16"
    assert outcomes["openvino bfloat16"].startswith("off the gate: relative error 0.2000 > 0.045")
    # The winner serves as it was tried (compile off: nothing to build again); the rest closed.
    serving = [fake for fake in built if not fake.closed]
    assert [fake.candidate.label for fake in serving] == ["torch bfloat16"]
    assert backend.spec.dtype == "bfloat16"


def test_the_winner_serves_as_tried_but_is_built_again_where_compile_on_asks_for_a_compile(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A trial runs torch as the compile cache holds it (a start never waits for a compile):
    with --compile auto the winner serves as its trial loaded it; with --compile on it is built
    again, to compile."""
    rates: dict[str, tuple[float, float] | Exception] = {
        "torch float32": (100.0, 0.0),
        "torch bfloat16": (300.0, 0.01),
    }
    for compile, builds in (("auto", 2), ("on", 3)):
        monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path / compile))
        built = faked(monkeypatch, rates)
        backend = choose(spec, compile=compile)
        assert backend.choice is not None and backend.choice.precision == "bfloat16"
        assert len(built) == builds
        assert all(fake.config and fake.config.compile == "cached" for fake in built[:2])
        serving = [fake for fake in built if not fake.closed]
        assert len(serving) == 1 and serving[0].config is not None
        assert serving[0].config.compile == ("cached" if compile == "auto" else "on")


def test_the_choice_is_cached_and_a_restart_reads_it_without_trials(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path))
    rates: dict[str, tuple[float, float] | Exception] = {
        "torch float32": (100.0, 0.0),
        "torch bfloat16": (300.0, 0.01),
        "onnxruntime float32": (200.0, 0.0),
        "openvino float32": (150.0, 0.0),
        "openvino bfloat16": (400.0, 0.0),
    }
    faked(monkeypatch, rates)
    first = choose(spec)
    assert first.choice is not None and first.choice.runtime == "openvino"
    auto = EngineConfig(backend="auto")
    path = choice_file(tmp_path, spec, auto, candidates.candidates(spec, auto))
    assert path.exists() and cached_choice(path) is not None

    def untimed(*args: Any) -> Probe:
        raise AssertionError("a restart must not measure")

    monkeypatch.setattr(trial_round, "run_probe", untimed)
    built = faked(monkeypatch, rates)
    monkeypatch.setattr(trial_round, "run_probe", untimed)
    again = choose(spec)
    assert again.choice is not None and again.choice.source == "cached"
    assert again.choice.trials == first.choice.trials
    assert [fake.candidate.label for fake in built] == ["openvino bfloat16"]
    # Another set of candidates (here: float32 only) is another entry, measured anew.
    in_float32 = dataclasses.replace(spec, dtype="float32")
    other = choice_file(tmp_path, in_float32, auto, candidates.candidates(in_float32, auto))
    assert other != path


def test_a_trial_runs_the_batches_the_scheduler_forms_packed_or_in_length_buckets(
    spec: ModelSpec,
) -> None:
    collate, config = collate_for(spec), EngineConfig()
    texts = trial.calibration_texts()[::8][:256]
    padded, places = trial.served_batches(spec, collate, False, config, 2, texts)
    packed, packed_places = trial.served_batches(spec, collate, True, config, 2, texts)
    # Every text's output goes back to its place, whichever batches the engine formed.
    assert sorted(places) == sorted(packed_places) == list(range(len(texts)))
    assert all(batch.packed is None for batch in padded)
    assert all(batch.packed is not None for batch in packed)
    # Packed rows take short inputs whatever their lengths; length buckets cut them.
    assert len(packed) < len(padded)


class Clock:
    """The trials' clock: it moves only as a costed backend loads or runs a batch."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def on_clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    for module in (trial, crew, trial_budget, trial_round, auto_backend):
        monkeypatch.setattr(module, "time", clock)
    return clock


class Costed(Fake):
    """A backend that takes `load` seconds on the clock to load, and `first` seconds a
    sentence for its first `first_sentences`, `steady` from then on."""

    def __init__(
        self,
        candidate: Candidate,
        spec: ModelSpec,
        clock: Clock,
        *,
        first: float,
        steady: float,
        load: float = 0.0,
        first_sentences: int = 256,
    ) -> None:
        super().__init__(candidate, spec)
        self.clock, self.first, self.steady, self.load_seconds = clock, first, steady, load
        self.first_sentences, self.sentences = first_sentences, 0

    def load(self) -> None:
        self.clock.now += self.load_seconds
        super().load()

    def executor(self) -> Any:
        def forward(batch: Batch, threads: int) -> list[np.ndarray]:
            for _ in batch.items:
                first = self.sentences < self.first_sentences
                self.clock.now += self.first if first else self.steady
                self.sentences += 1
            return [np.ones(3)] * len(batch.items)

        return forward


def test_a_trial_s_passes_end_early_when_it_is_slower_or_its_share_is_spent(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = on_clock(monkeypatch)
    collate, config = collate_for(spec), EngineConfig()
    texts = trial.trial_texts()
    count = len(texts)

    def probe(first: float, steady: float, limits: trial.Limits) -> tuple[Costed, Probe]:
        backend = Costed(
            Candidate("torch", "float32"), spec, clock, first=first / count, steady=steady / count
        )
        # One runner: the fake clock is not shared by a crew's threads (test_trial_crew.py
        # runs a crew of two).
        return backend, trial.run_probe(backend, collate, config, 1, 1, texts, limits)

    # The fastest so far took 1.0 s a pass.
    fastest = trial.Limits(first_pass=4.0, cut_off=1.5)
    # A first pass of 2.5 s does not decide; a first timed pass of 1.6 s is past 1.5x it.
    _, cut = probe(2.5, 1.6, fastest)
    assert cut.ended == "cut-off" and cut.passes == 1 and cut.single_ms is None
    assert cut.sentences_per_second == pytest.approx(count / 1.6)
    # A first pass that would take 5 s is stopped at 4 s: slower, whatever it would judge.
    stopped_backend, stopped = probe(5.0, 5.0, fastest)
    assert stopped.ended == "first pass" and not stopped.outputs
    assert stopped_backend.sentences < count and stopped.sentences == stopped_backend.sentences
    assert stopped.sentences_per_second == pytest.approx(count / 5.0, rel=0.05)
    # A first pass of 2.5 s, then 1.2 s a pass (within the cut-off): its timed passes decide.
    _, timed = probe(2.5, 1.2, fastest)
    assert timed.ended is None and timed.passes == 2 and len(timed.outputs) == count
    assert timed.sentences_per_second == pytest.approx(count / 1.2)
    # Its share spent, one timed pass and no more.
    _, brief = probe(2.5, 1.2, trial.Limits(until=clock.now))
    assert brief.ended is None and brief.passes == 1
    # The reference sizes the timed passes from its first one (here: 64 sentences).
    backend = Costed(Candidate("torch", "float32"), spec, clock, first=2 / count, steady=1 / count)
    sized = trial.run_probe(
        backend, collate, config, 1, 1, texts, trial.Limits(), sizing=lambda first: 64
    )
    assert len(sized.outputs) == count and sized.sentences == 64
    assert sized.pass_seconds == pytest.approx(64 / count)
    # Two within 10 % are timed again in turn, each rate its new passes' median.
    _, rival = probe(1.1, 1.1, trial.Limits())
    assert trial.near(timed, rival) and not trial.near(timed, cut)
    again, rival_again = trial.duel(timed, rival, passes=3)
    assert again.passes == timed.passes + 3
    assert again.sentences_per_second == pytest.approx(count / 1.2)
    assert rival_again.sentences_per_second == pytest.approx(count / 1.1)


def test_every_candidate_is_timed_when_the_first_trial_takes_most_of_the_budget(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: Any
) -> None:
    """A slow machine: the reference's load alone takes 20 of the 30 s. Every other candidate
    is still timed, on fewer sentences a pass, and the fastest is chosen."""
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path))
    clock = on_clock(monkeypatch)
    seconds_a_sentence = {  # steady; a first pass takes twice as long
        "torch float32": 0.010,
        "torch bfloat16": 0.050,  # emulated-slow: stopped in its first pass
        "openvino bfloat16": 0.008,
        "onnxruntime float32": 0.006,
        "openvino float32": 0.004,  # the fastest, tried last
    }
    loads = {"torch float32": 20.0, "openvino bfloat16": 6.0}  # 6 s: the ONNX export
    built: list[Costed] = []

    def build(candidate: Candidate, spec: ModelSpec, *_: Any, **__: Any) -> Costed:
        cost = seconds_a_sentence[candidate.label]
        built.append(
            Costed(
                candidate,
                spec,
                clock,
                first=2 * cost,
                steady=cost,
                load=loads.get(candidate.label, 1.0),
                # The reference's first pass runs every sentence, the others' those sized.
                first_sentences=256 if candidate.label == "torch float32" else 64,
            )
        )
        return built[-1]

    monkeypatch.setattr(trial_round, "build", build)
    caplog.set_level(logging.INFO, logger="poolserve.backends.choice")
    chosen = choose(spec, runners=1)
    choice = chosen.choice
    assert choice is not None and (choice.runtime, choice.precision) == ("openvino", "float32")
    rows = {f"{t.runtime} {t.precision}": t for t in choice.trials}
    assert set(rows) == set(seconds_a_sentence)
    assert all(row.sentences_per_second for row in rows.values()), rows
    assert rows["torch bfloat16"].outcome.startswith("slower (its first pass was stopped at ")
    # Sized from the reference's first pass to what was left: fewer than 256 sentences a pass.
    lines = [r.getMessage() for r in caplog.records if "timed pass(es) of" in r.getMessage()]
    assert len(lines) == 4 and all("pass(es) of 64 sentences" in line for line in lines)
    # Over the budget only by the least every trial takes (a load, a first and a timed pass).
    least = sum(loads.get(label, 1.0) for label in seconds_a_sentence)
    least += 256 * 2 * seconds_a_sentence["torch float32"]  # the reference's first pass
    least += sum(64 * 3 * cost for cost in seconds_a_sentence.values())
    assert clock.now <= least
    # The measured rates are the steady ones.
    for label, cost in seconds_a_sentence.items():
        if label != "torch bfloat16":
            assert rows[label].sentences_per_second == pytest.approx(1 / cost)


def test_a_candidate_cut_off_or_timed_again_says_so_and_only_after_every_trial(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path))
    rates: dict[str, tuple[float, float] | Exception] = {
        "torch float32": (100.0, 0.0),
        "torch bfloat16": (300.0, 0.01),
        "openvino bfloat16": (310.0, 0.0),  # near torch bf16: both timed again
        "onnxruntime float32": (120.0, 0.0),  # its first timed pass is past the cut-off
        "openvino float32": (150.0, 0.0),
    }
    built = faked(monkeypatch, rates)
    events: list[str] = []
    label_of: dict[int, str] = {}  # a probe's crew's id: its candidate

    def duel(one: Probe, other: Probe, passes: int) -> tuple[Probe, Probe]:
        events.append(f"duel {label_of[id(one.crew)]} / {label_of[id(other.crew)]}")
        # Timed in turn, torch bf16 turns out the faster of the two.
        return tuple(  # type: ignore[return-value]
            dataclasses.replace(probe, sentences_per_second=320.0)
            if label_of[id(probe.crew)] == "torch bfloat16"
            else probe
            for probe in (one, other)
        )

    faked_probe = trial_round.run_probe

    def run_probe(backend: Fake, *args: Any) -> Probe:
        probe = faked_probe(backend, *args)
        label = backend.candidate.label
        label_of[id(probe.crew)] = label
        events.append(f"trial {label}")
        if label == "onnxruntime float32":
            return dataclasses.replace(probe, ended="cut-off", pass_seconds=3 * probe.pass_seconds)
        return probe

    monkeypatch.setattr(trial_round, "run_probe", run_probe)
    monkeypatch.setattr(trial_round, "duel", duel)
    choice = choose(spec).choice
    assert choice is not None and (choice.runtime, choice.precision) == ("torch", "bfloat16")
    assert events[-1] == "duel openvino bfloat16 / torch bfloat16"
    assert len(events) == 6  # every trial first
    rows = {f"{t.runtime} {t.precision}": t for t in choice.trials}
    assert rows["torch bfloat16"].sentences_per_second == 320.0
    assert rows["openvino bfloat16"].outcome == "slower, timed again in turn with torch bfloat16"
    assert rows["onnxruntime float32"].outcome.startswith("slower (its first timed pass took ")
    assert [fake.candidate.label for fake in built if not fake.closed] == ["torch bfloat16"]

    # With the budget spent, the near pair is not timed again: the first figures stand.
    class Spent(trial_budget.TrialBudget):
        def left(self) -> float:
            return 0.0

    events.clear()
    monkeypatch.setattr(auto_backend, "TrialBudget", Spent)
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path / "again"))
    choice = choose(spec).choice
    assert choice is not None and (choice.runtime, choice.precision) == ("openvino", "bfloat16")
    assert not [event for event in events if event.startswith("duel")]
    rows = {f"{t.runtime} {t.precision}": t for t in choice.trials}
    assert rows["torch bfloat16"].outcome == (
        "slower than openvino bfloat16, by less than 10 % (the budget left no time to time "
        "them again in turn)"
    )


def test_a_precision_the_cpu_emulates_serves_as_asked_and_says_what_it_costs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: Any
) -> None:
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path))
    on_cpu(monkeypatch, AVX2)
    rates: dict[str, tuple[float, float] | Exception] = {
        "torch float32": (169.0, 0.0),
        "torch bfloat16": (34.0, 0.01),
    }
    faked(monkeypatch, rates)
    caplog.set_level(logging.INFO, logger="poolserve.backends.choice")
    emulated = bundled("bfloat16")
    # Named, it is still measured beside float32 (the only way to tell its cost).
    backend = auto_backend.make_backend(
        emulated, EngineConfig(backend="torch"), collate_for(emulated)
    )
    assert isinstance(backend, AutoBackend)
    backend.load()
    choice = backend.choice
    assert choice is not None and (choice.runtime, choice.precision) == ("torch", "bfloat16")
    rows = {f"{t.runtime} {t.precision}": t for t in choice.trials}
    assert rows["torch float32"].sentences_per_second == 169.0  # timed, for the cost
    assert rows["torch float32"].outcome == "the reference (not a candidate)"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "sentence-transformers/all-MiniLM-L6-v2: --dtype bfloat16 was asked for, and this CPU "
        "only emulates it (it has no AVX512-BF16 or AMX): torch bfloat16 ran 34 sentences/s "
        "against float32's 169 (0.20x); leave --dtype out to serve the fastest precision it runs"
    ]

    def untimed(*args: Any) -> Probe:
        raise AssertionError("a restart must not measure")

    monkeypatch.setattr(trial_round, "run_probe", untimed)
    caplog.clear()
    again = auto_backend.make_backend(emulated, EngineConfig(backend="torch"), None)  # type: ignore[arg-type]
    again.load()
    assert again.choice is not None and again.choice.source == "cached"
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == warned


def test_the_cached_choice_is_the_cpu_s_own(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A choice measured on one CPU is not read on another: its key holds the CPU's flags and
    model name (a CPU moved under a VM, or an image run on another kind, measures anew)."""
    auto = EngineConfig(backend="auto")
    found = candidates.candidates(spec, auto)
    path = choice_file(tmp_path, spec, auto, found)
    assert choice_file(tmp_path, spec, auto, found) == path
    on_cpu(monkeypatch, AVX512_BF16 | {"avx512_vnni"})
    assert choice_file(tmp_path, spec, auto, found) != path
    on_cpu(monkeypatch, AVX512_BF16)
    monkeypatch.setattr(device, "cpu_model", lambda: "AMD EPYC 7B13")
    assert choice_file(tmp_path, spec, auto, found) != path


@pytest.mark.parametrize("flags", [AVX2, AVX512_BF16], ids=["avx2", "avx512-bf16"])
def test_a_forced_engine_and_precision_builds_that_backend_without_choosing(
    monkeypatch: pytest.MonkeyPatch, flags: frozenset[str]
) -> None:
    from poolserve.backends.graph.graph_backend import GraphBackend

    def on_openvino(backend: object) -> bool:
        return isinstance(backend, GraphBackend) and backend.runtime.name == "openvino"

    on_cpu(monkeypatch, flags)
    config, spec = EngineConfig(backend="openvino"), bundled()
    in_bf16 = dataclasses.replace(spec, dtype="bfloat16")
    if flags == AVX2:  # OpenVINO runs bf16 only where the CPU does
        with pytest.raises(SettingError) as refused:
            auto_backend.make_backend(in_bf16, config, collate_for(spec))
        assert refused.value.cli_message == (
            "--backend openvino --dtype bfloat16 needs a CPU that runs it natively "
            "(AVX512-BF16 or AMX); this one runs float32: leave --dtype out"
        )
        forced = auto_backend.make_backend(spec, config, collate_for(spec))
        assert on_openvino(forced) and forced.spec.dtype == "float32"
        return
    forced = auto_backend.make_backend(in_bf16, config, collate_for(spec))
    assert on_openvino(forced) and forced.spec.dtype == "bfloat16"
    assert forced.choice is None
    measured = auto_backend.make_backend(spec, config, collate_for(spec))
    assert isinstance(measured, AutoBackend)


@pytest.mark.slow
def test_every_candidate_runs_a_real_tiny_model_and_the_winner_answers_as_float32_does(
    classifier_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On this CPU: every candidate it runs is timed, and the winner answers as float32."""
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path))
    texts = ["The quick brown fox jumps over the lazy dog.", "Short one."]
    model = ModelConfig(model=str(classifier_dir))
    config = EngineConfig(backend="auto")
    with Engine(model_config=model, engine_config=config) as engine:
        choice = engine.core.choice
        assert choice is not None and choice.source == "measured"
        own = candidates.candidates(place(prepare_model(model)), config).tried
        measured = [t for t in choice.trials if t.sentences_per_second is not None]
        assert {f"{t.runtime} {t.precision}" for t in measured} == {c.label for c in own}
        chosen = [t for t in choice.trials if t.outcome == "chosen"]
        assert len(chosen) == 1
        # Every other one that passed the gate lost to it (which one is fastest, at a tiny
        # model's noisy rates, the tests with decided rates above check).
        assert not [t for t in choice.trials if t.outcome == "passed"]
        got = engine.classify(texts)
    reference = ModelConfig(model=str(classifier_dir), dtype="float32")
    with Engine(model_config=reference) as torch_float32:
        np.testing.assert_allclose(got, torch_float32.classify(texts), atol=0.02)
