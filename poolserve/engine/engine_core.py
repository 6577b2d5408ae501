"""The engine: composition root of the CPU pool, the scheduler, the backend and the runner threads.

Everything here is synchronous and thread-safe; the HTTP server and the offline API are thin
adapters over `open_group` / `submit` and the group's future.

The backend loads the weights once, on the first runner's thread; then each runner gets its own
executor on its own thread. With N runners the engine serves while at least one is alive; when
the last one dies, every waiting request is failed at once and new work is refused.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from functools import partial
from typing import Any

from poolserve.config import EngineConfig
from poolserve.config.fields import check_settings
from poolserve.config.priorities import DEFAULT_PRIORITY
from poolserve.engine.collate import Batch
from poolserve.engine.cpu_pool import CpuPool
from poolserve.engine.model_backend import (
    BackendFactory,
    Forward,
    PrecisionReport,
    QuantizationReport,
    RuntimeChoice,
)
from poolserve.engine.model_inputs import build_processor, collate_for, processor_key
from poolserve.engine.preparations import Preparation, WakeEachTurn
from poolserve.engine.result_cache import ResultCache
from poolserve.engine.runner import Runner
from poolserve.engine.runner_layout import has_express_runner, runner_layout
from poolserve.engine.scheduler import Scheduler, SchedulerClosedError
from poolserve.engine.stats import EngineStats
from poolserve.engine.work import RequestGroup, WorkItem
from poolserve.errors import EngineUnavailableError, SettingError
from poolserve.inputs.tokenizer import TextTokenizer
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

# How much lower the runners' OS priority is than the express runner's and the event loop's
# (nice values): a CPU-bound thread at nice 5 weighs a third of one at 0, so an express batch
# beside two background batches on two cores runs at nearly a whole core.
EXPRESS_NICE = 5
# Why an engine whose runners have all died refuses work.
NOT_RUNNING = "the model runner is not running; see the server log"

logger = logging.getLogger(__name__)


def check_engine_settings(model: ModelSpec, config: EngineConfig) -> None:
    """Refuse (SettingError, one line) engine settings that cannot work for `model`."""
    if config.max_batch_tokens < model.max_model_len:
        raise SettingError(
            f"--max-batch-tokens {config.max_batch_tokens} is less than the model's length "
            f"limit {model.max_model_len}: the longest input would never fit in a batch"
        )
    check_settings(config)  # what each flag would refuse, given in Python
    if config.cores is not None and config.cores < 1:
        raise SettingError(f"cores must be at least 1, got {config.cores}")


def invariant_config(config: EngineConfig) -> EngineConfig:
    """`config` as a batch-invariant engine runs (backends/torch_model/batch_invariant.py); a
    setting that contradicts it is refused in one line."""
    if not config.batch_invariant:
        return config
    conflicts = {
        "--compile on/cached": config.compile in ("on", "cached"),
        f"--quantize {config.quantize}": config.quantize != "off",
        f"--backend {config.backend}": config.backend not in ("auto", "torch"),
    }
    for setting, conflicting in conflicts.items():
        if conflicting:
            raise SettingError(
                f"--batch-invariant runs eager torch forwards of its own; {setting} cannot be "
                "batch-invariant: leave it out"
            )
    return replace(config, compile="off", packing="off", single_thread_tokens=0, backend="torch")


class EngineCore:
    def __init__(
        self,
        model: ModelSpec,
        config: EngineConfig,
        *,
        backend: BackendFactory,
        cpu: CpuPool | None = None,
    ) -> None:
        """`backend` builds the model's backend, which places it (device, precision) and
        refuses what cannot work, before any thread starts; `cpu`: a pool shared with other
        models (its owner shuts it down), None: the engine's own pool of `config.cpu_workers`
        threads."""
        check_engine_settings(model, config)
        config = invariant_config(config)
        self.config = config
        self._collate_items = collate_for(model)
        self.backend = backend(model, config, self._collate_items)
        runners, self._threads = runner_layout(config, self.model.device)
        express = has_express_runner(config, self.model)
        self.stats = EngineStats(runners, express)
        self._owns_cpu = cpu is None
        self.cpu = cpu or CpuPool(config.cpu_workers)
        self._scheduler = Scheduler(
            max_batch_tokens=config.max_batch_tokens,
            max_batch_size=config.max_batch_size,
            window=config.schedule_window,
            stats=self.stats,
            lend_tokens=config.single_thread_tokens if self.model.device == "cpu" else 0,
            bucket_padding_tokens=config.bucket_padding_tokens,
            packs=self._packs,
            # Beside an express runner, background batches need no slices (scheduler.py).
            background_slice=0.0 if express else config.background_slice,
            express=express,
            tokenizing=self._tokenizing,
        )
        self._wake_each_turn = WakeEachTurn(self._scheduler.wake_preparers)
        self.cache = (
            ResultCache(config.cache_bytes, self._scheduler_submit) if config.cache_bytes else None
        )
        nice = EXPRESS_NICE if express else 0
        self._runners = [self._new_runner(index, nice=nice) for index in range(runners)]
        if express:
            self._runners.append(self._new_runner(runners, express=True))
        self._threads_started: list[threading.Thread] = []
        # Set once the first runner has loaded the weights (or failed to).
        self._loaded: Future[None] = Future()
        self._on_dead: list[Callable[[], None]] = []
        self._processor_key = processor_key(self.model)
        # Whether the runners prepare small requests themselves (`prepare`): a text model's
        # (an image is decoded and resized in the CPU pool).
        self.runners_prepare = self.model.layout.vision is None
        # Whether a runner also answers the requests it prepares (post-processes and encodes
        # them) rather than handing them to the CPU pool: a static table's, whose lookup costs
        # less than the hand-off (benchmarks.tree_ab, 4 rounds: one-sentence requests at c=64
        # +9 %, 32-sentence ones at c=8 +8 %). A transformer's runner keeps its core for its
        # forward passes (all-MiniLM-L6-v2 with every runner answering: -6 %).
        self.runners_answer = self.model.layout.static is not None

    def _new_runner(self, index: int, express: bool = False, nice: int = 0) -> Runner:
        return Runner(
            index,
            self._scheduler,
            self._collate,
            partial(self._make_forward, index),
            self.stats,
            threads=self._threads or 1,
            on_death=self._runner_died,
            deliveries=self.cpu.holding,
            express=express,
            nice=nice,
        )

    @property
    def model(self) -> ModelSpec:
        """The model as the backend runs it (its precision known once loaded, where measured)."""
        return self.backend.spec

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the threads and wait until every runner is ready; raises if loading fails.

        The first runner loads the weights; once they are loaded every other runner starts,
        and each builds and warms up its own executor over the shared weights, all at once
        (one after another, two runners took twice as long to be ready)."""
        self.cpu.warm_up(self._processor_key, self._build_processor)
        first, *others = self._runners
        try:
            self._start_runner(first)
            self._loaded.result()
            for runner in others:
                self._start_runner(runner)
            for runner in self._runners:
                runner.ready.result()
        except BaseException:
            # A failed load has ended its runner; an interrupt may leave one still loading.
            self.close(timeout=1.0)
            raise

    def _start_runner(self, runner: Runner) -> None:
        name = "poolserve-express-runner" if runner.express else f"poolserve-runner-{runner.index}"
        thread = threading.Thread(target=runner.run, name=name, daemon=True)
        thread.start()
        self._threads_started.append(thread)

    def close(self, timeout: float | None = None) -> bool:
        """Finish every admitted item, then stop the threads and the pool.

        With a `timeout` (seconds, for the whole close), work still running when it passes is
        abandoned: waiting requests are failed, and a runner stuck in a forward pass is left
        behind (its thread is a daemon). Returns False if anything was left behind."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._scheduler.close()
        for thread in self._threads_started:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        stuck = [thread.name for thread in self._threads_started if thread.is_alive()]
        if stuck:
            logger.error(
                "%s still busy after %g s of closing; abandoning it",
                ", ".join(stuck),
                timeout,
            )
            error = EngineUnavailableError("the server shut down before this request finished")
            for item in self._scheduler.abort():
                item.group.fail(error)
        else:
            # No runner runs a forward any more: what the loaded model holds can go.
            self.backend.close()
        if self._owns_cpu:
            self.cpu.shutdown(wait=not stuck)
        return not stuck

    def release(self) -> None:
        """Stop without waiting (any thread, a garbage collector's finalizer included): the
        runners finish what is queued and exit, the pool's idle threads exit."""
        self._scheduler.close()
        if self._owns_cpu:
            self.cpu.shutdown(wait=False)

    def processor(self) -> Any:
        """The calling CPU-pool thread's processor of this model's inputs, which a task's
        preprocessing turns them into work items with: its tokenizer (for an image-text model,
        a tokenizer that also prepares images: inputs/image_processor.py)."""
        return self.tokenizer()

    def tokenizer(self) -> TextTokenizer:
        """The calling CPU-pool thread's tokenizer of this model."""
        return self.cpu.processor(self._processor_key, self._build_processor)

    def _tokenizing(self, texts: list[str]) -> AbstractContextManager[object]:
        """The calling runner's tokenizer with `texts` tokenized in one call (if it cannot be
        had, each preparation's own call says why, to its own request)."""
        try:
            tokenizer = self.tokenizer()
        except Exception:
            return nullcontext()
        return tokenizer.primed(texts)

    def _build_processor(self, key: str) -> TextTokenizer:
        return build_processor(self.model)

    @property
    def runners(self) -> int:
        """The runners (the express runner, which serves only beside them, is not one)."""
        return sum(not runner.express for runner in self._runners)

    @property
    def runners_alive(self) -> int:
        return sum(runner.alive and not runner.express for runner in self._runners)

    @property
    def alive(self) -> bool:
        """True while at least one runner can serve."""
        return any(
            runner.alive and not runner.express and thread.is_alive()
            for runner, thread in zip(self._runners, self._threads_started, strict=False)
        )

    # -- work -------------------------------------------------------------------------------

    def open_group(self, size: int, priority: int = DEFAULT_PRIORITY) -> RequestGroup:
        return RequestGroup(size, priority)

    def prepare(
        self,
        priority: int,
        inputs: int,
        fn: Callable[..., None],
        *args: object,
        dropped: Callable[[], None],
        texts: Sequence[str] = (),
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Have a runner call `fn(*args)`, the preparation of a small request of `inputs`
        inputs, which submits its items, before its next batch (engine/preparations.py: no
        thread is woken under load); `dropped()` instead if the engine stops first (or its last
        runner dies). `texts`: those it tokenizes, tokenized with the other preparations' in
        one call. Called on an event loop (`loop`), the runner is woken once the loop's turn
        is done, for every request the turn queued (`WakeEachTurn`)."""
        preparation = Preparation(fn, args, dropped, texts)
        try:
            self._scheduler.prepare(priority, inputs, preparation, wake=loop is None)
        except SchedulerClosedError as exc:  # closing, or closed as its last runner died
            if not self.alive:
                raise EngineUnavailableError(NOT_RUNNING) from exc
            raise EngineUnavailableError("the server is shutting down; retry elsewhere") from exc
        if loop is not None:
            self._wake_each_turn.soon(loop)

    def submit(self, items: Iterable[WorkItem]) -> None:
        """Hand prepared items to the scheduler (those the result cache cannot answer)."""
        if not self._threads_started:  # (a closed engine's scheduler refuses them itself)
            raise EngineUnavailableError(NOT_RUNNING)
        self._scheduler_submit(items if self.cache is None else self.cache.route(items))

    def _scheduler_submit(self, items: Iterable[WorkItem]) -> None:
        try:
            self._scheduler.submit(items)
        except SchedulerClosedError as exc:  # closing, or closed as its last runner died
            if not self.alive:
                raise EngineUnavailableError(NOT_RUNNING) from exc
            raise EngineUnavailableError("the server is shutting down; retry elsewhere") from exc

    def wait_for_idle_runners(self, count: int, timeout: float) -> bool:
        """Block until `count` runners wait for work (a hook for tests)."""
        return self._scheduler.wait_for_idle_runners(count, timeout)

    @property
    def queued_items(self) -> int:
        return self._scheduler.queued_items

    @property
    def queued_tokens(self) -> int:
        return self._scheduler.queued_tokens

    def queued_by_lane(self) -> dict[int, int]:
        """Items waiting for a runner, by lane (priority)."""
        return self._scheduler.queued_by_lane()

    @property
    def tokens_in_work(self) -> int:
        """Tokens waiting for a runner or in a batch that has not ended."""
        return self._scheduler.tokens_in_work

    @property
    def peak_tokens_in_work(self) -> int:
        """The most tokens ever in work at once (admission control's bound, measured)."""
        return self._scheduler.peak_tokens_in_work

    @property
    def compiled(self) -> str:
        """How the main head's forward was obtained (model_backend.CompileSource)."""
        return self.backend.report.source

    @property
    def precision(self) -> PrecisionReport | None:
        """How `--dtype auto` chose the precision (None where it was asked for)."""
        return self.backend.precision

    @property
    def quantization(self) -> QuantizationReport | None:
        """The quantized model's quality gate (None where nothing is quantized)."""
        return self.backend.quantization

    @property
    def choice(self) -> RuntimeChoice | None:
        """How `--backend auto` chose the engine (None where it was asked for)."""
        return self.backend.choice

    @property
    def packed_heads(self) -> frozenset[Head]:
        """The heads whose batches run packed (known once the backend has loaded, before any
        runner takes a batch)."""
        return self.backend.packed_heads

    # -- runner threads ---------------------------------------------------------------------

    def _packs(self, head: Head) -> bool:
        return head in self.packed_heads

    def _collate(self, items: list[WorkItem]) -> Batch:
        return self._collate_items(items, self._packs(items[0].head))

    def _make_forward(self, index: int) -> Forward:
        """Runs on runner `index`'s thread: (first runner) the weights, then its own warmed-up
        executor (the backend sets the thread's intra-op threads before its first operator)."""
        if index == 0:
            try:
                self.backend.load()
            except BaseException as exc:
                self._loaded.set_exception(exc)
                raise
            self._loaded.set_result(None)
        if self.runners_prepare:  # the runner's own tokenizer, before its first request
            self.processor()
        return self.backend.executor()

    def when_dead(self, callback: Callable[[], None]) -> None:
        """Call `callback` (on a runner's thread) once no runner is left (gRPC health)."""
        self._on_dead.append(callback)

    def _runner_died(self) -> None:
        """Once no runner is left, fail what waits: nobody would ever run it."""
        if self.runners_alive == 0:
            error = EngineUnavailableError("the model runner stopped; see the server log")
            for item in self._scheduler.abort():
                item.group.fail(error)
            for callback in self._on_dead:
                callback()
