"""The engine core with several runners, over a fake backend (the engine's backend seam): the
weights load once and each runner builds its own executor on its own thread; batches run on the
runners at the same time; a dying runner leaves the others serving, and the last one to die fails
what waits; closing drains every runner.

The model spec is the bundled model's (no weights are loaded: the backend is fake).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from poolserve.config import EngineConfig, ModelConfig
from poolserve.engine.collate import Batch, text_item
from poolserve.engine.engine_core import EXPRESS_NICE, EngineCore
from poolserve.engine.model_backend import CompileReport
from poolserve.engine.runner_layout import available_cores, runner_layout
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.errors import EngineUnavailableError, InferenceError
from poolserve.models.describe import ModelSpec, prepare_model
from poolserve.models.kinds import Head

WAIT = 10
POISON = 666
THREAD_DIES = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


class Fatal(BaseException):
    """Escapes `except Exception`: kills the runner thread."""


def rows(batch: Batch) -> np.ndarray:
    """One row per item: [length, first token]."""
    return np.array([[item.cost, item.payload.input_ids[0]] for item in batch.items], np.float32)


class FakeBackend:
    """Records where it was loaded and where each executor was built."""

    def __init__(self, spec: ModelSpec, forward: Callable[[Batch, int], np.ndarray]) -> None:
        self.spec = dataclasses.replace(spec, device="cpu", dtype="float32")
        self.forward = forward
        self.packed_heads: frozenset[Head] = frozenset()
        self.report = CompileReport("eager")
        self.precision = None
        self.quantization = None
        self.choice = None
        self.load_threads: list[str] = []
        self.executor_threads: list[str] = []
        # Each executor's thread's nice value, by thread name.
        self.nice: dict[str, int] = {}

    def close(self) -> None:
        pass

    def load(self) -> None:
        self.load_threads.append(threading.current_thread().name)

    def executor(self) -> Callable[[Batch, int], np.ndarray]:
        name = threading.current_thread().name
        self.executor_threads.append(name)
        self.nice[name] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        return self.forward


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    return prepare_model(ModelConfig(dtype="float32"))


@pytest.fixture
def start_core(spec: ModelSpec) -> Iterator[Callable[..., tuple[EngineCore, FakeBackend]]]:
    cores: list[EngineCore] = []

    def start(
        forward: Callable[[Batch, int], np.ndarray], **config: Any
    ) -> tuple[EngineCore, FakeBackend]:
        backend = FakeBackend(spec, forward)
        core = EngineCore(
            spec, EngineConfig(cpu_workers=1, **config), backend=lambda *args: backend
        )
        core.start()
        cores.append(core)
        return core, backend

    yield start
    for core in cores:
        core.close(WAIT)


def submit(core: EngineCore, *first_tokens: int, length: int = 3) -> RequestGroup:
    group = core.open_group(len(first_tokens))
    core.submit(
        text_item(group, i, [token] + [5] * (length - 1)) for i, token in enumerate(first_tokens)
    )
    return group


def test_weights_load_once_and_each_runner_builds_its_executor_on_its_thread(
    start_core: Callable[..., tuple[EngineCore, FakeBackend]],
) -> None:
    core, backend = start_core(lambda batch, threads: rows(batch), runners=3)
    assert core.runners == core.runners_alive == 3
    assert backend.load_threads == ["poolserve-runner-0"]
    assert sorted(backend.executor_threads) == [f"poolserve-runner-{i}" for i in range(3)]
    group = submit(core, *range(10, 40))
    assert [row.tolist() for row in group.future.result(WAIT)] == [[3, t] for t in range(10, 40)]


def test_batches_run_on_two_runners_at_once(
    start_core: Callable[..., tuple[EngineCore, FakeBackend]],
) -> None:
    """Each of the first two batches waits inside the forward until the other one is there too:
    they can only finish if two runners run them at the same time."""
    together = threading.Barrier(2, timeout=WAIT)
    threads_seen: set[str] = set()

    def forward(batch: Batch, threads: int) -> np.ndarray:
        if len(threads_seen) < 2:
            threads_seen.add(threading.current_thread().name)
            together.wait()
        return rows(batch)

    core, _ = start_core(forward, runners=2, max_batch_size=1)
    first, second = submit(core, 10), submit(core, 11)
    assert first.future.result(WAIT)[0].tolist() == [3, 10]
    assert second.future.result(WAIT)[0].tolist() == [3, 11]
    assert threads_seen == {"poolserve-runner-0", "poolserve-runner-1"}
    snapshot = core.stats.snapshot()
    assert snapshot.overlapped_batches >= 1
    assert snapshot.max_concurrent_batches == 2
    assert [runner.batches for runner in snapshot.runners] == [1, 1]


def test_one_request_split_over_runners_is_reassembled_in_order(
    start_core: Callable[..., tuple[EngineCore, FakeBackend]],
) -> None:
    core, _ = start_core(lambda batch, threads: rows(batch), runners=2, max_batch_size=3)
    groups = [submit(core, *range(100 * g, 100 * g + 50)) for g in range(20)]
    for g, group in enumerate(groups):
        assert [int(row[1]) for row in group.future.result(WAIT)] == list(
            range(100 * g, 100 * g + 50)
        )
    assert core.stats.snapshot().items == 20 * 50


def test_a_poisoned_batch_fails_only_its_request_with_two_runners(
    start_core: Callable[..., tuple[EngineCore, FakeBackend]],
) -> None:
    def forward(batch: Batch, threads: int) -> np.ndarray:
        if any(item.payload.input_ids[0] == POISON for item in batch.items):
            raise RuntimeError("poisoned")
        return rows(batch)

    core, _ = start_core(forward, runners=2)
    clean = [submit(core, 10 + i, 20 + i) for i in range(20)]
    poisoned = submit(core, 7, POISON)
    clean += [submit(core, 50 + i) for i in range(20)]
    with pytest.raises(InferenceError):
        poisoned.future.result(WAIT)
    for group in clean:
        assert all(row[0] == 3 for row in group.future.result(WAIT))
    assert core.runners_alive == 2


@THREAD_DIES
def test_a_dead_runner_leaves_the_others_serving_and_the_last_fails_what_waits(
    start_core: Callable[..., tuple[EngineCore, FakeBackend]],
) -> None:
    entered, release = threading.Semaphore(0), threading.Event()

    def forward(batch: Batch, threads: int) -> np.ndarray:
        if any(item.payload.input_ids[0] == POISON for item in batch.items):
            entered.release()
            release.wait(WAIT)
            raise Fatal("the runner thread is going down")
        return rows(batch)

    core, _ = start_core(forward, runners=2, max_batch_size=1)
    first = submit(core, POISON)
    assert entered.acquire(timeout=WAIT)
    release.set()
    with pytest.raises(EngineUnavailableError, match="runner stopped"):
        first.future.result(WAIT)
    # One runner is gone; the engine still serves with the other.
    assert core.runners_alive == 1
    assert core.alive
    assert submit(core, 12).future.result(WAIT)[0].tolist() == [3, 12]

    release.clear()
    second = submit(core, POISON)
    assert entered.acquire(timeout=WAIT)
    waiting = [submit(core, 30 + i) for i in range(3)]
    release.set()
    with pytest.raises(EngineUnavailableError):
        second.future.result(WAIT)
    for group in waiting:
        with pytest.raises(EngineUnavailableError, match="runner stopped"):
            group.future.result(WAIT)
    assert core.runners_alive == 0
    assert not core.alive
    with pytest.raises(EngineUnavailableError, match="not running"):
        submit(core, 40)
    alive = [runner.alive for runner in core.stats.snapshot().runners if not runner.express]
    assert alive == [False, False]


def test_close_drains_every_runner(
    start_core: Callable[..., tuple[EngineCore, FakeBackend]],
) -> None:
    """Close while both runners are inside a batch and more work waits: everything finishes."""
    entered, gate = threading.Semaphore(0), threading.Event()

    def forward(batch: Batch, threads: int) -> np.ndarray:
        entered.release()
        gate.wait(WAIT)
        return rows(batch)

    core, _ = start_core(forward, runners=2, max_batch_size=2)
    groups = [submit(core, 10 + i, 20 + i, 30 + i) for i in range(10)]
    assert entered.acquire(timeout=WAIT) and entered.acquire(timeout=WAIT)
    closing = threading.Thread(target=core.close, args=(WAIT,))
    closing.start()
    gate.set()
    closing.join(WAIT)
    assert not closing.is_alive()
    for i, group in enumerate(groups):
        assert [int(row[1]) for row in group.future.result(0)] == [10 + i, 20 + i, 30 + i]
    snapshot = core.stats.snapshot()
    assert snapshot.items == 30
    assert all(runner.batches > 0 for runner in snapshot.runners if not runner.express)
    assert not core.alive


def test_a_lone_large_batch_borrows_the_idle_runners_threads(
    start_core: Callable[..., tuple[EngineCore, FakeBackend]],
) -> None:
    """On CPU, a batch of at least --single-thread-tokens padded tokens that finds the other
    runners idle runs with their threads too; a small one keeps to its own."""
    seen: list[tuple[int, int]] = []

    def forward(batch: Batch, threads: int) -> np.ndarray:
        seen.append((batch.padded_tokens, threads))
        return rows(batch)

    core, _ = start_core(forward, runners=2, torch_threads=1, single_thread_tokens=64)
    assert core.model.device == "cpu"
    submit(core, 10, length=8).future.result(WAIT)
    assert core.wait_for_idle_runners(2, WAIT)  # both back, waiting: one can lend its core
    submit(core, 11, length=100).future.result(WAIT)
    assert seen == [(8, 1), (100, 2)]


def test_runner_layout_divides_the_cores() -> None:
    assert runner_layout(EngineConfig(runners=2, torch_threads=None), "cpu")[0] == 2
    assert runner_layout(EngineConfig(runners=1, torch_threads=3), "cpu") == (1, 3)
    assert runner_layout(EngineConfig(), "cuda") == (1, None)
    _, threads = runner_layout(EngineConfig(runners=1), "cpu")
    assert threads is not None and threads >= 1
    # By default: a runner per core, compiled or eager.
    cores = available_cores()
    assert runner_layout(EngineConfig(compile="off"), "cpu") == (cores, 1)
    assert runner_layout(EngineConfig(compile="on"), "cpu") == (cores, 1)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"runners": 0}, "at least 1"),
        ({"torch_threads": 0}, "at least 1"),
        ({"compile": "yes"}, "off, on, auto or cached"),
    ],
)
def test_settings_that_cannot_work_are_refused(
    spec: ModelSpec, setting: dict[str, Any], message: str
) -> None:
    from poolserve.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match=message):
        EngineCore(spec, EngineConfig(**setting), backend=refuse_to_build)


def refuse_to_build(*args: Any) -> Any:
    raise AssertionError("a backend was built for settings that cannot work")


def test_several_runners_compile_too(spec: ModelSpec) -> None:
    """Ahead-of-time compiled code has no guards to misfire from several threads, so the
    compile mode holds whatever the number of runners."""
    from poolserve.backends.torch.torch_backend import TorchBackend, make_backend

    def mode(**config: Any) -> str:
        backend = make_backend(spec, EngineConfig(**config), rows_batch)
        assert isinstance(backend, TorchBackend)
        return backend.compile_mode

    assert mode(runners=2, compile="auto") == "auto"
    assert mode(runners=2, compile="on") == "on"
    assert mode(runners=1, compile="off") == "off"


def rows_batch(items: list[WorkItem]) -> Batch:
    from poolserve.engine.collate import collate

    return collate(items, pad_token_id=0)


class HeldBackground:
    """A forward whose background batches (priority above 0) each signal `holding` and wait for
    `release`; other batches run at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.holding = threading.Semaphore(0)

    def __call__(self, batch: Batch, threads: int) -> np.ndarray:
        if batch.items[0].group.priority > 0:
            self.holding.release()
            self.release.wait(WAIT)
        return rows(batch)


def test_beside_background_work_a_request_runs_at_once_on_the_express_runner(
    start_core: Callable[..., tuple[EngineCore, FakeBackend]],
) -> None:
    """Both runners hold background batches that do not end; a request of the default lane
    is answered meanwhile, by the express runner, whose thread has the higher OS priority."""
    forward = HeldBackground()
    core, backend = start_core(forward, runners=2, express_runner=True)
    assert sorted(backend.executor_threads)[0] == "poolserve-express-runner"
    bulk = core.open_group(2, priority=5)
    core.submit(text_item(bulk, i, [20 + i, 5, 5]) for i in range(2))
    for _ in range(2):  # one background batch on each runner
        assert forward.holding.acquire(timeout=WAIT)
    query = submit(core, 7)
    try:
        assert [list(row) for row in query.future.result(WAIT)] == [[3, 7]]
        assert not bulk.future.done()
    finally:
        forward.release.set()
    assert [int(row[1]) for row in bulk.future.result(WAIT)] == [20, 21]
    express = [runner for runner in core.stats.snapshot().runners if runner.express]
    assert [runner.items for runner in express] == [1]
    base = backend.nice["poolserve-express-runner"]
    assert backend.nice["poolserve-runner-0"] == backend.nice["poolserve-runner-1"]
    assert backend.nice["poolserve-runner-0"] == min(19, base + EXPRESS_NICE)


def test_without_an_express_runner_a_request_waits_for_a_runner(
    start_core: Callable[..., tuple[EngineCore, FakeBackend]],
) -> None:
    forward = HeldBackground()
    core, backend = start_core(forward, runners=1, express_runner=False)
    assert "poolserve-express-runner" not in backend.executor_threads
    bulk = core.open_group(1, priority=5)
    core.submit([text_item(bulk, 0, [20, 5, 5])])
    assert forward.holding.acquire(timeout=WAIT)
    query = submit(core, 7)
    forward.release.set()
    assert [list(row) for row in query.future.result(WAIT)] == [[3, 7]]
    # It ran after the background batch, on the one runner: that request was answered first.
    assert bulk.future.done()
