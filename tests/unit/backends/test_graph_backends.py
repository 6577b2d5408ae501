"""The backends that run the exported graph, ONNX Runtime and OpenVINO: every kind's answers
equal the references (float32), int8 passes its quality gate on the bundled model (and a restart
takes it from the cache) and is refused on a model whose int8 breaks it."""

from __future__ import annotations

import multiprocessing
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.corpus import sentences
from poolserve import Engine, EngineConfig, ModelConfig
from poolserve.backends.quality_gate import MEAN_COSINE, MIN_COSINE
from poolserve.backends.torch_model.deferred_module import DeferredModule
from poolserve.errors import ModelLoadError
from tests.reference import st_encode
from tests.tiny_models import (
    classifier_reference_probs,
    cross_encoder_reference_scores,
    make_int8_breaking_embedding,
)

pytestmark = pytest.mark.slow

# Real sentences of several lengths, and a passage of over 200 tokens.
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Return a new array of given shape and type, filled with zeros.",
    "A context manager that changes the working directory for the duration of the block.",
    "Short one.",
    " ".join(["Each passage of a long document is read in turn and its vectors pooled."] * 14),
]
PAIRS_QUERY = "how do I read a file line by line"
DOCUMENTS = [
    "Open the file and iterate over it: each iteration yields one line.",
    "The weather in Lisbon is mild in winter.",
    "Use readlines() to get every line of a file as a list.",
]
SMALL = {"cpu_workers": 1, "max_batch_tokens": 4096}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ONNX cache for the module: each model is exported once (both runtimes run the
    same graph)."""
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module", params=["onnxruntime", "openvino"])
def runtime(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def load(cache: Path, runtime: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("POOLSERVE_CACHE_DIR", str(cache))
    engines: list[Engine] = []

    def engine(directory: Path | None, backend: str = runtime, **options: Any) -> Engine:
        model = ModelConfig(model=None if directory is None else str(directory), dtype="float32")
        config = EngineConfig(backend=backend, **SMALL, **options)
        engines.append(Engine(model_config=model, engine_config=config))
        return engines[-1]

    yield engine
    for each in engines:
        each.close()


def test_embeddings_equal_sentence_transformers(load: Any, runtime: str, st_model: Any) -> None:
    engine = load(None)
    assert not engine.core.packed_heads  # length buckets: faster than packed on ONNX Runtime
    got = engine.embed(TEXTS)
    np.testing.assert_allclose(got, st_encode(st_model, TEXTS), atol=2e-5)
    assert engine.core.quantization is None and engine.core.compiled == runtime


def test_a_restart_serves_the_cached_graph_and_loads_the_torch_module_only_when_needed(
    load: Any, st_model: Any
) -> None:
    load(None).embed(TEXTS[:1])  # the graph in the cache (exported by the first start)
    engine = load(None)
    module = engine.core.backend._model.module
    assert isinstance(module, DeferredModule) and not module.built
    np.testing.assert_allclose(engine.embed(TEXTS), st_encode(st_model, TEXTS), atol=2e-5)
    assert not module.built
    engine.pool(TEXTS[:1], task="token_embed")  # another head: the torch module, built now
    assert module.built


def test_cross_encoder_scores_equal_sentence_transformers(
    load: Any, cross_encoder_dir: Path
) -> None:
    engine = load(cross_encoder_dir)
    expected = cross_encoder_reference_scores(
        cross_encoder_dir, [(PAIRS_QUERY, document) for document in DOCUMENTS]
    )
    np.testing.assert_allclose(engine.score(PAIRS_QUERY, DOCUMENTS), expected, atol=2e-5)


def test_classifier_probabilities_equal_transformers(load: Any, classifier_dir: Path) -> None:
    engine = load(classifier_dir)
    expected = classifier_reference_probs(classifier_dir, TEXTS)
    np.testing.assert_allclose(engine.classify(TEXTS), expected, atol=2e-5)


@pytest.mark.parametrize(
    ("fixture", "head"),
    [
        ("colbert_dir", "token_embed"),
        ("splade_dir", "sparse"),
        ("token_classifier_dir", "token_classify"),
    ],
)
def test_token_and_sparse_heads_equal_the_torch_backend(
    load: Any, request: pytest.FixtureRequest, fixture: str, head: str
) -> None:
    """The torch backend's answers are checked against their references elsewhere."""
    directory = request.getfixturevalue(fixture)
    expected = load(directory, backend="torch").pool(TEXTS, task=head, truncate_prompt_tokens=-1)
    got = load(directory).pool(TEXTS, task=head, truncate_prompt_tokens=-1)
    for a, b in zip(got, expected, strict=True):
        if isinstance(b, dict):  # a sparse vector: token -> weight (absent: 0)
            tokens = sorted(set(a) | set(b))
            a, b = [a.get(t, 0.0) for t in tokens], [b.get(t, 0.0) for t in tokens]
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=5e-5)


def test_int8_passes_the_gate_on_the_bundled_model_and_keeps_its_vectors(
    load: Any, st_model: Any, corpus: Any, cache: Path
) -> None:
    """Where this CPU's int8 kernels pass the gate, int8 serves, and keeps the gate's promise on
    real prose it never saw (Python's docstrings: the gate checks other libraries' docs); where
    they do not, the gate refuses it in one line naming the figures that fall short, and the
    fallback serves float32's vectors."""
    try:
        engine = load(None, quantize="int8")
    except ModelLoadError as refused:
        message = str(refused)
        assert "\n" not in message and "int8 fails the quality gate against float32" in message
        shortfalls = re.findall(r"(mean|min) cosine (0\.\d+) < (0\.\d+)", message)
        assert shortfalls and all(float(got) < float(bound) for _, got, bound in shortfalls)
        fallback = load(None, quantize="int8", quantize_gate="fallback")
        report = fallback.core.quantization
        assert report is not None and report.served == "float32" and report.failures
        texts = corpus.within[:50]
        np.testing.assert_allclose(fallback.embed(texts), st_encode(st_model, texts), atol=2e-5)
        return
    report = engine.core.quantization
    assert report is not None and report.served == "int8" and report.failures == ()
    assert report.figures["mean_cosine"] >= MEAN_COSINE
    assert report.figures["min_cosine"] >= MIN_COSINE
    # Against sentence-transformers in float32: real prose at the gate's own bounds.
    prose = sentences(2000)[:200]
    cosines = (engine.embed(prose) * st_encode(st_model, prose)).sum(axis=1)
    assert cosines.mean() >= MEAN_COSINE and cosines.min() >= MIN_COSINE, (cosines.min(),)
    # The test corpus's odd inputs (unicode, whitespace, punctuation, 256 tokens of filler),
    # where int8 is weakest: their mean at the gate's bound, the worst within 0.95 (seen:
    # 0.965 with OpenVINO's AVX2 kernels, 0.98 with its AVX-512 ones; prose 0.99 on both).
    texts = corpus.within[:200]
    got, expected = engine.embed(texts), st_encode(st_model, texts)
    cosines = (got * expected).sum(axis=1)
    assert cosines.mean() >= MEAN_COSINE and cosines.min() >= 0.95, (cosines.min(),)
    assert engine.core.precision is None
    # A restart takes the graphs from the cache: no entry is written again.
    entries = sorted((cache / "onnx").glob("*/entry.json"))
    stamps = [path.stat().st_mtime_ns for path in entries]
    restarted = load(None, quantize="int8")
    assert [path.stat().st_mtime_ns for path in entries] == stamps
    assert sorted((cache / "onnx").glob("*/entry.json")) == entries
    # ONNX Runtime quantizes activations per batch, so a text's vector moves a little with its
    # batch (OpenVINO's activation ranges are fixed).
    again = (restarted.embed(texts[:8]) * got[:8]).sum(axis=1)
    assert again.min() >= 0.99, again


def test_int8_that_breaks_is_refused_in_one_line_or_served_unquantized(
    load: Any, tmp_path: Path
) -> None:
    directory = make_int8_breaking_embedding(tmp_path / "breaks")
    with pytest.raises(
        ModelLoadError, match=r"int8 fails the quality gate .*min cosine"
    ) as refused:
        load(directory, quantize="int8")
    assert "\n" not in str(refused.value)
    engine = load(directory, quantize="int8", quantize_gate="fallback")
    report = engine.core.quantization
    assert report is not None and report.served == "float32" and report.failures
    expected = load(directory, backend="torch").embed(TEXTS)
    np.testing.assert_allclose(engine.embed(TEXTS), expected, atol=2e-5)


def test_settings_it_cannot_honour_are_refused_before_loading(runtime: str) -> None:
    dtype = "bfloat16" if runtime == "onnxruntime" else "float16"
    with pytest.raises(ModelLoadError, match=f"backend {runtime} runs float32"):
        Engine(
            model_config=ModelConfig(dtype=dtype),
            engine_config=EngineConfig(backend=runtime, **SMALL),
        )


def _threads_cpu_and_nice() -> dict[int, tuple[int, int]]:
    """Each thread of this process: (its CPU ticks so far, its nice value)."""
    found = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        # After the command: state, ..., utime (12th), stime (13th), ..., nice (17th).
        found[int(task.name)] = (int(fields[11]) + int(fields[12]), int(fields[16]))
    return found


def _who_works(runtime: str, cache: str) -> dict[str, tuple[int, dict[int, int]]]:
    """A runner at nice +5 loads the bundled model's backend, then it and an express runner at
    the process's priority each run forwards. By runner: its nice, and the nice of each thread
    that did a fifth of its work or more."""
    import os

    from poolserve.backends.choice.auto_backend import make_backend
    from poolserve.backends.torch_model.precision import probe_batches
    from poolserve.engine.engine_core import EXPRESS_NICE
    from poolserve.engine.model_inputs import collate_for
    from poolserve.engine.runner import lower_priority, thread_nice
    from poolserve.models.describe import prepare_model

    os.environ["POOLSERVE_CACHE_DIR"] = cache
    spec = prepare_model(ModelConfig(dtype="float32"))
    collate = collate_for(spec)
    backend = make_backend(spec, EngineConfig(backend=runtime, runners=2, **SMALL), collate)
    batches = probe_batches(spec, collate)
    found: dict[str, tuple[int, dict[int, int]]] = {}

    def runner(name: str, nice: int) -> None:
        if nice:
            lower_priority(nice)
            backend.load()
        forward = backend.executor()
        before = _threads_cpu_and_nice()
        for _ in range(3):
            for batch in batches:
                forward(batch, 1)
        after = _threads_cpu_and_nice()
        grown = {tid: ticks - before.get(tid, (0, 0))[0] for tid, (ticks, _) in after.items()}
        total = sum(grown.values())
        working = {tid: after[tid][1] for tid, ticks in grown.items() if ticks * 5 >= total}
        found[name] = (thread_nice(), working)

    for name, nice in (("runner", EXPRESS_NICE), ("express", 0)):
        thread = threading.Thread(target=runner, args=(name, nice))
        thread.start()
        thread.join()
    backend.close()
    return found


def _who_works_in_each(runtimes: tuple[str, ...], cache: str) -> dict[str, Any]:
    return {runtime: _who_works(runtime, cache) for runtime in runtimes}


def test_the_threads_that_run_a_runner_s_batches_run_at_its_os_priority(cache: Path) -> None:
    """The express runner's thread runs above the runners' (nice +5: engine_core.py), and the
    threads that do its batches' work must too, whatever the runtime: ONNX Runtime computes on
    the calling thread, OpenVINO's models with several streams on threads of their own, which
    take the priority of the thread that made them (the express runner's model, one stream,
    runs on its own thread). Measured by where the CPU time of each one's forwards goes, in a
    fresh process: OpenVINO hands a finished model's stream threads to the next model compiled
    alike, and another test's, made at another priority, would be reused."""
    runtimes = ("onnxruntime", "openvino")
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as fresh:
        by_runtime = fresh.submit(_who_works_in_each, runtimes, str(cache)).result()
    for runtime, found in by_runtime.items():
        (runner_nice, runner_threads), (express_nice, express_threads) = (
            found["runner"],
            found["express"],
        )
        if runner_nice == express_nice:
            pytest.skip("this system refused to lower a thread's priority")
        assert runner_threads and express_threads, (runtime, found)
        assert set(runner_threads.values()) == {runner_nice}, (runtime, found)
        assert set(express_threads.values()) == {express_nice}, (runtime, found)
