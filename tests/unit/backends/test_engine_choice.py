"""`--backend auto`: the candidates the machine and the flags allow, the fastest that passes the
gate chosen (a failing engine and one off the gate left out, with why), the choice cached and read
at the next start, and on a real tiny model every candidate run and its answers served."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve import Engine, EngineConfig, ModelConfig
from poolserve.backends.choice import auto_backend, candidates, crew, trial
from poolserve.backends.choice.auto_backend import AutoBackend
from poolserve.backends.choice.candidates import Candidate
from poolserve.backends.choice.choice_cache import cached_choice, choice_file
from poolserve.backends.choice.crew import Crew
from poolserve.backends.choice.trial import Probe
from poolserve.backends.torch.device import place
from poolserve.engine.engine_core import collate_for
from poolserve.engine.model_backend import CompileReport
from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.describe import prepare_model
from poolserve.models.spec import ModelSpec

ALL = ("float32", "bfloat16")
REFERENCE = [np.array([1.0, 0.0, 0.0]), np.array([0.0, 2.0, 1.0])]


@pytest.fixture
def spec(monkeypatch: pytest.MonkeyPatch) -> ModelSpec:
    """The bundled model on a CPU that runs float32 and bf16, every engine installed."""
    monkeypatch.setattr(candidates, "cpu_precisions", lambda: ALL)
    return place(dataclasses.replace(prepare_model(ModelConfig()), dtype="auto"))


def labels(spec: ModelSpec, **config: Any) -> list[str]:
    found = candidates.candidates(spec, EngineConfig(backend="auto", **config))
    return [candidate.label for candidate in found.tried]


def test_the_candidates_are_each_engine_in_each_precision_narrowed_by_the_flags(
    spec: ModelSpec,
) -> None:
    # The reference first, then the lower precision (timed before the budget can run out).
    everything = ["torch float32", "torch bfloat16", "openvino bfloat16"]
    everything += ["onnxruntime float32", "openvino float32"]
    assert labels(spec) == everything
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


def test_an_engine_not_installed_is_left_out_naming_its_extra(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = candidates.EngineEntry.installed
    monkeypatch.setattr(
        candidates.EngineEntry, "installed", lambda self: self.name != "openvino" and real(self)
    )
    found = candidates.candidates(spec, EngineConfig(backend="auto"))
    assert "openvino bfloat16" not in [c.label for c in found.tried]
    why = dict(found.left_out)[Candidate("openvino", "bfloat16")]
    assert why == "not installed (pip install 'poolserve[openvino]')"
    monkeypatch.setattr(candidates.EngineEntry, "installed", lambda self: False)
    with pytest.raises(SettingError) as refused:
        auto_backend.make_backend(spec, EngineConfig(backend="auto", quantize="int8"), None)  # type: ignore[arg-type]
    assert refused.value.cli_message.startswith(
        "no engine can run this model with --quantize int8 here (onnxruntime int8: not installed"
    )


class Fake:
    """A candidate's backend whose probe the test decides."""

    def __init__(self, candidate: Candidate, spec: ModelSpec) -> None:
        self.candidate = candidate
        self.spec = dataclasses.replace(spec, dtype=candidate.precision)
        self.packed_heads: frozenset[str] = frozenset()
        self.report = CompileReport("eager")
        self.precision = self.quantization = self.choice = None
        self.loaded = self.closed = False

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

    def build(candidate: Candidate, spec: ModelSpec, config: Any, collate: Any) -> Fake:
        outcome = rates[candidate.label]
        if isinstance(outcome, Exception):
            raise outcome
        built.append(Fake(candidate, spec))
        return built[-1]

    def run_probe(backend: Fake, *args: Any) -> Probe:
        rate, error = rates[backend.candidate.label]  # type: ignore[misc]
        outputs = [vector * (1 + error) for vector in REFERENCE]
        one_runner = Crew(backend, backend.executor(), 1, 1)  # type: ignore[arg-type]
        return Probe(outputs, rate, 1.0, len(outputs) / rate, one_runner, [])

    monkeypatch.setattr(auto_backend, "build", build)
    monkeypatch.setattr(auto_backend, "run_probe", run_probe)
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
    assert (choice.engine, choice.precision) == ("torch", "bfloat16")
    outcomes = {f"{t.engine} {t.precision}": t.outcome for t in choice.trials}
    assert outcomes["torch float32"] == "slower"
    assert outcomes["torch bfloat16"] == "chosen"
    assert outcomes["onnxruntime float32"] == "failed: the exporter broke"
    assert outcomes["openvino float32"] == "slower"
    assert outcomes["openvino bfloat16"].startswith("off the gate: relative error 0.2000 > 0.045")
    # The winner serves as it was tried (compile off: nothing to build again); the rest closed.
    serving = [fake for fake in built if not fake.closed]
    assert [fake.candidate.label for fake in serving] == ["torch bfloat16"]
    assert backend.spec.dtype == "bfloat16"


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
    assert first.choice is not None and first.choice.engine == "openvino"
    auto = EngineConfig(backend="auto")
    path = choice_file(tmp_path, spec, auto, candidates.candidates(spec, auto))
    assert path.exists() and cached_choice(path) is not None

    def untimed(*args: Any) -> Probe:
        raise AssertionError("a restart must not measure")

    monkeypatch.setattr(auto_backend, "run_probe", untimed)
    built = faked(monkeypatch, rates)
    monkeypatch.setattr(auto_backend, "run_probe", untimed)
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
    """trial.py's clock: it moves only as a costed forward runs a batch."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class Costed(Fake):
    """A backend each of whose batches takes `costs[i]` on the clock at its i-th pass (the
    last cost from then on)."""

    def __init__(self, spec: ModelSpec, clock: Clock, batches: int, *costs: float) -> None:
        super().__init__(Candidate("torch", "float32"), spec)
        self.clock, self.batches, self.costs, self.runs = clock, batches, costs, 0

    def executor(self) -> Any:
        def forward(batch: Any, threads: int) -> list[np.ndarray]:
            self.clock.now += self.costs[min(self.runs // self.batches, len(self.costs) - 1)]
            self.runs += 1
            return [np.zeros(3)] * len(batch.items)

        return forward


def test_a_first_pass_past_the_cut_off_ends_the_probe_and_near_rates_are_timed_again(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(trial, "time", clock)
    monkeypatch.setattr(crew, "time", clock)
    collate = collate_for(spec)
    texts = trial.calibration_texts()[:: len(trial.calibration_texts()) // 256][:256]
    count, config = len(texts), EngineConfig()
    batches = len(trial.served_batches(spec, collate, False, config, 1, texts)[0])
    # The fastest so far took 1.0 s a pass. A warm-up pass of 2.5 s does not decide; a first
    # timed pass of 1.6 s is past 1.5x it: not timed on. (One runner: the fake clock is not
    # shared by a crew's threads; test_trial_crew.py runs a crew of two.)
    slow = Costed(spec, clock, batches, 2.5 / batches, 1.6 / batches)
    probe = trial.run_probe(slow, collate, config, 1, 1, fastest=1.0)
    assert probe.first_pass_only and probe.single_ms is None
    assert slow.runs == 2 * batches and probe.sentences_per_second == pytest.approx(count / 1.6)
    # A warm-up of 2.5 s, then 1.2 s a pass (within the cut-off): its timed passes decide.
    warming = Costed(spec, clock, batches, 2.5 / batches, 1.2 / batches)
    timed = trial.run_probe(warming, collate, config, 1, 1, fastest=1.0)
    assert not timed.first_pass_only
    assert timed.sentences_per_second == pytest.approx(count / 1.2)
    # Two within 10 % are timed again in turn, each rate its new passes' median.
    other = Costed(spec, clock, batches, 1.1 / batches)
    rival = trial.run_probe(other, collate, config, 1, 1)
    assert trial.near(timed, rival) and not trial.near(timed, probe)
    warming.costs, other.costs = (1.0 / batches,), (1.3 / batches,)
    again, rival_again = trial.duel(timed, rival)
    assert again.sentences_per_second == pytest.approx(count / 1.0)
    assert rival_again.sentences_per_second == pytest.approx(count / 1.3)


def test_a_candidate_cut_off_or_dueled_says_so_in_the_table(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path))
    rates: dict[str, tuple[float, float] | Exception] = {
        "torch float32": (100.0, 0.0),
        "torch bfloat16": (300.0, 0.01),
        "openvino bfloat16": (310.0, 0.0),  # near torch bf16: both timed again
        "onnxruntime float32": (120.0, 0.0),  # its first pass is past the cut-off
        "openvino float32": (150.0, 0.0),
    }
    faked(monkeypatch, rates)
    timed_again: list[tuple[str, str]] = []
    label_of: dict[int, str] = {}  # a probe's crew's id: its candidate

    def duel(one: Probe, other: Probe) -> tuple[Probe, Probe]:
        timed_again.append((label_of[id(one.crew)], label_of[id(other.crew)]))
        # Timed in turn, torch bf16 turns out the faster of the two.
        return dataclasses.replace(one, sentences_per_second=320.0), other

    def cut_off(probe: Probe, label: str) -> Probe:
        if label != "onnxruntime float32":
            return probe
        return dataclasses.replace(probe, single_ms=None, pass_seconds=3 * probe.pass_seconds)

    faked_probe = auto_backend.run_probe

    def run_probe(backend: Fake, *args: Any) -> Probe:
        probe = faked_probe(backend, *args)
        label_of[id(probe.crew)] = backend.candidate.label
        return cut_off(probe, backend.candidate.label)

    monkeypatch.setattr(auto_backend, "run_probe", run_probe)
    monkeypatch.setattr(auto_backend, "duel", duel)
    choice = choose(spec).choice
    assert choice is not None and (choice.engine, choice.precision) == ("torch", "bfloat16")
    assert timed_again == [("torch bfloat16", "openvino bfloat16")]
    rows = {f"{t.engine} {t.precision}": t for t in choice.trials}
    assert rows["torch bfloat16"].sentences_per_second == 320.0
    assert rows["openvino bfloat16"].outcome == "slower, timed again in turn with torch bfloat16"
    assert rows["onnxruntime float32"].outcome.startswith("slower (its first timed pass took ")


def test_a_forced_engine_and_precision_builds_that_backend_without_choosing(
    spec: ModelSpec,
) -> None:
    from poolserve.backends.openvino.ov_backend import OvBackend

    config = EngineConfig(backend="openvino")
    forced = auto_backend.make_backend(
        dataclasses.replace(spec, dtype="bfloat16"), config, collate_for(spec)
    )
    assert isinstance(forced, OvBackend) and forced.spec.dtype == "bfloat16"
    assert forced.choice is None
    measured = auto_backend.make_backend(spec, config, collate_for(spec))
    assert isinstance(measured, AutoBackend)


@pytest.mark.slow
def test_every_candidate_runs_a_real_tiny_model_and_the_winner_answers_as_float32_does(
    classifier_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(tmp_path))
    texts = ["The quick brown fox jumps over the lazy dog.", "Short one."]
    model = ModelConfig(model=str(classifier_dir))
    with Engine(model_config=model, engine_config=EngineConfig(backend="auto")) as engine:
        choice = engine.core.choice
        assert choice is not None and choice.source == "measured"
        measured = [t for t in choice.trials if t.sentences_per_second is not None]
        assert {f"{t.engine} {t.precision}" for t in measured} >= {
            "torch float32",
            "onnxruntime float32",
            "openvino float32",
        }
        chosen = [t for t in choice.trials if t.outcome == "chosen"]
        assert len(chosen) == 1
        # Every other one that passed the gate lost to it (which one is fastest, at a tiny
        # model's noisy rates, the tests with decided rates above check).
        assert not [t for t in choice.trials if t.outcome == "passed"]
        got = engine.classify(texts)
    reference = ModelConfig(model=str(classifier_dir), dtype="float32")
    with Engine(model_config=reference) as torch_float32:
        np.testing.assert_allclose(got, torch_float32.classify(texts), atol=0.02)
