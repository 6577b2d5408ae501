"""`poolserve embed --ray`: the bulk job's parts embedded by a pool of engine actors that rides
out losing some of them.

The job itself (reading, parts on disk, resuming, errors) runs where the command runs, as
without Ray; only `embed_counted_later` goes to the actors, each call to the ready actor with
the fewest calls outstanding. A call whose actor is lost (its node died, its process crashed)
goes to another, and the lost actor is replaced: the replacement takes calls once the cluster
has placed it and it has loaded the model. Embedding is deterministic and the job writes each
part once, from its calls' results, so every record is written exactly once whichever actor
embedded it. While no actor is ready, calls wait, for `wait_seconds` at most: then they fail
with one line saying what was lost, and the same command resumes after the parts written.

Ray settles a call's future on a thread of its own. Made from that thread, the Ray calls that
follow a lost actor (a call sent again, an actor killed and another started) hung the job
at its first lost node: they run on the pool's own thread instead (`_follow_up`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray

from poolserve.config import EngineConfig, ModelConfig
from poolserve.config.priorities import LOWEST_PRIORITY
from poolserve.errors import ModelLoadError
from poolserve.ray.cluster import actor_engine_config
from poolserve.ray.engine_actor import (
    ACTOR_LOST,
    EngineActor,
    EngineActorsLostError,
    first_line,
    free_cpus,
    init_failed,
)

if TYPE_CHECKING:
    from poolserve.tasks.counted_embed import CountedEmbeddings

logger = logging.getLogger("poolserve")

# How long calls wait with no actor ready before the job stops: a node that restarts, or one
# the autoscaler adds, is back within it (docs/ray.md).
ACTOR_WAIT_SECONDS = 300.0
# A call is sent this many times at most: an input that kills every actor it meets stops the
# job rather than every actor the cluster can start. And each actor asked for is replaced
# this many times at most (a node that keeps failing).
MAX_SENDS = 3
REPLACEMENTS = 3
# How often the start-up says what it waits for.
PROGRESS_SECONDS = 10.0


@dataclass(eq=False)
class _Slot:
    """One engine actor of the pool: ready once it has loaded the model, lost once a call
    found it gone."""

    actor: Any
    ready: bool = False
    lost: bool = False
    outstanding: int = 0


@dataclass(eq=False)
class _Call:
    """One `embed_counted_later` call, kept until it is answered (it may be sent again)."""

    texts: list[str]
    options: dict[str, Any]
    result: Future[CountedEmbeddings] = field(default_factory=Future)
    sends: int = 0


class RayEmbedder:
    """What the bulk job needs of an engine (`name`, `embedding_dim`, `embedding_space`,
    `embed_counted_later`), served by `replicas` engine actors of `replica_cpus` CPUs each.
    `resume`: the command that resumes the job, for the line that stops it."""

    def __init__(
        self,
        model_config: ModelConfig,
        engine_config: EngineConfig,
        *,
        replicas: int,
        replica_cpus: float,
        wait_seconds: float = ACTOR_WAIT_SECONDS,
        resume: str = "",
    ) -> None:
        actor_class: Any = ray.remote(num_cpus=replica_cpus)(EngineActor)
        config = actor_engine_config(engine_config, replica_cpus)
        self._new_actor: Callable[[], Any] = lambda: actor_class.remote(model_config, config)
        self.replicas = replicas
        self._replica_cpus = replica_cpus
        self._wait_seconds = wait_seconds
        self._resume = resume
        self._lock = threading.Lock()  # the pool's state, written on Ray's and the job's threads
        self._ready = threading.Condition(self._lock)  # an actor got ready, or the pool stopped
        self._slots: list[_Slot] = []
        self._waiting: deque[_Call] = deque()
        self._timer: threading.Timer | None = None
        self._stopped: str | None = None  # why calls fail at once, once the pool gave up
        self._first: Future[tuple[str, int]] = Future()
        self._follow_ups = ThreadPoolExecutor(1, thread_name_prefix="poolserve-ray-actors")
        for _ in range(replicas):
            self._add_actor()
        self.name, self.embedding_dim = self._first_described()

    def _add_actor(self) -> None:
        with self._lock:
            if self._stopped is not None:  # (a loss handled as the pool closed)
                return
        slot = _Slot(self._new_actor())
        with self._lock:
            self._slots.append(slot)
        described = slot.actor.describe.remote().future()
        described.add_done_callback(lambda done: self._described(slot, done))

    def _described(self, slot: _Slot, done: Future[tuple[str, int]]) -> None:
        """On Ray's thread: the actor has loaded the model (or failed to)."""
        error = done.exception()
        if error is not None:
            if isinstance(error, ACTOR_LOST) and not init_failed(error):
                self._follow_up(self._lose, slot, error)
            elif not self._first.done():  # the model cannot load: the job cannot run
                cannot = f"an engine actor could not load the model: {first_line(error)}"
                with contextlib.suppress(InvalidStateError):  # (another actor was first)
                    self._first.set_exception(ModelLoadError(cannot))
            else:  # a replacement that cannot load: the others go on
                logger.warning("an engine actor could not load the model: %s", first_line(error))
            return
        with self._lock:
            if slot.lost:
                return
            slot.ready = True
            waiting = list(self._waiting)
            self._waiting.clear()
            self._disarm()
            self._ready.notify_all()
        if not self._first.done():
            with contextlib.suppress(InvalidStateError):  # (another actor was first)
                self._first.set_result(done.result())
        logger.debug("an engine actor is ready (%d calls were waiting)", len(waiting))
        for call in waiting:
            self._follow_up(self._send, call)

    def _first_described(self) -> tuple[str, int]:
        """The model's name and width from the first actor ready, saying what it waits for
        meanwhile; EngineActorsLostError (one line) if none is within `wait_seconds`."""
        waited = 0.0
        while True:
            step = min(PROGRESS_SECONDS, self._wait_seconds - waited)
            try:
                return self._first.result(timeout=step)
            except FutureTimeout:
                waited += step
            except BaseException:  # the model cannot load (ModelLoadError, one line)
                self.close()
                raise
            if waited >= self._wait_seconds:
                self.close()
                raise EngineActorsLostError(
                    f"none of the {self.replicas} engine actors of {self._replica_cpus:g} "
                    f"CPU(s) was ready within {self._wait_seconds:g} s (the cluster has "
                    f"{free_cpus():g} CPUs free): lower --replicas or --replica-cpus, or add "
                    "nodes"
                ) from None
            logger.info(
                "waiting for the engine actors to be placed and load the model (%.0f s of "
                "%g s): %d actor(s) of %g CPU(s) asked, the cluster has %g CPUs free",
                waited,
                self._wait_seconds,
                self.replicas,
                self._replica_cpus,
                free_cpus(),
            )

    # -- calls ---------------------------------------------------------------------------

    def embedding_space(
        self, *, normalize: bool | None = None, dimensions: int | None = None
    ) -> str:
        """The fingerprint of the vectors' space (every actor runs the same model)."""
        options = {"normalize": normalize, "dimensions": dimensions}
        while True:
            with self._lock:  # (one lost meanwhile: the next, as long as calls would wait)
                self._ready.wait_for(
                    lambda: self._stopped is not None or any(self._usable()),
                    timeout=self._wait_seconds,
                )
                ready = list(self._usable())
            if not ready:
                raise EngineActorsLostError(self._lost_message())
            try:
                space: str = ray.get(ready[0].actor.embedding_space.remote(options))
            except ACTOR_LOST as exc:
                self._lose(ready[0], exc)
                continue
            return space

    def _usable(self) -> Iterator[_Slot]:
        """Under the lock: the actors calls may go to."""
        if self._stopped is None:
            yield from (slot for slot in self._slots if slot.ready and not slot.lost)

    def embed_counted_later(
        self,
        texts: Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        skip_too_long: bool = False,
        images: bool = False,
        priority: int = LOWEST_PRIORITY,
    ) -> Future[CountedEmbeddings]:
        options = {
            "normalize": normalize,
            "dimensions": dimensions,
            "truncate_prompt_tokens": truncate_prompt_tokens,
            "skip_too_long": skip_too_long,
            "images": images,
            "priority": priority,
        }
        call = _Call(list(texts), options)
        self._send(call)
        return call.result

    def _send(self, call: _Call) -> None:
        """To the ready actor with the fewest calls outstanding; with none ready, the call
        waits for one (`wait_seconds` at most)."""
        if call.result.done():  # cancelled by the job while it waited
            return
        with self._lock:
            if self._stopped is not None:
                stopped = self._stopped
            else:
                stopped = None
                ready = list(self._usable())
                if not ready:
                    self._waiting.append(call)
                    self._arm()
                    return
                slot = min(ready, key=lambda each: each.outstanding)
                slot.outstanding += 1
                call.sends += 1
        if stopped is not None:
            _settle_error(call.result, EngineActorsLostError(stopped))
            return
        try:
            remote = slot.actor.embed_counted.remote(call.texts, call.options).future()
        except Exception as exc:  # its handle is unusable: as if it were lost
            with self._lock:
                slot.outstanding -= 1
            self._send_again(slot, call, exc)
            return
        remote.add_done_callback(lambda done: self._answered(slot, call, done))

    def _answered(self, slot: _Slot, call: _Call, done: Future[CountedEmbeddings]) -> None:
        """On Ray's thread: the call's outcome, or, where its actor was lost, the call sent to
        another."""
        with self._lock:
            slot.outstanding -= 1
        error = None if done.cancelled() else done.exception()
        if call.result.done():  # cancelled by the job meanwhile
            if isinstance(error, ACTOR_LOST):
                self._follow_up(self._lose, slot, error)
            return
        if done.cancelled():
            call.result.cancel()
            return
        if error is None:
            with contextlib.suppress(Exception):  # (a cancel may win the race)
                call.result.set_result(done.result())
            return
        if not isinstance(error, ACTOR_LOST):
            _settle_error(call.result, error)
            return
        self._follow_up(self._send_again, slot, call, error)

    def _send_again(self, slot: _Slot, call: _Call, error: BaseException) -> None:
        """`call`'s actor was lost: the call goes to another, unless it has been sent
        MAX_SENDS times."""
        self._lose(slot, error)
        if call.sends >= MAX_SENDS:
            _settle_error(
                call.result,
                EngineActorsLostError(
                    f"{len(call.texts)} texts were sent to {call.sends} engine actors and each "
                    f"was lost ({first_line(error)}); {self._resume_hint()}"
                ),
            )
            return
        self._send(call)

    def _follow_up(self, fn: Callable[..., None], *args: Any) -> None:
        """`fn(*args)` on the pool's own thread (the module's docstring: not on Ray's)."""
        with contextlib.suppress(RuntimeError):  # closed: the job is over, nobody waits
            self._follow_ups.submit(fn, *args)

    # -- losses --------------------------------------------------------------------------

    def _lose(self, slot: _Slot, error: BaseException) -> None:
        """`slot`'s actor is gone: no call goes to it, and a replacement starts (it takes
        calls once the cluster has placed it and it has loaded the model)."""
        with self._lock:
            if slot.lost:
                return
            slot.lost = True
            if self._stopped is not None:
                return
            lost = sum(each.lost for each in self._slots)
            ready = sum(each.ready and not each.lost for each in self._slots)
            replace = len(self._slots) < self.replicas * (1 + REPLACEMENTS)
        logger.warning(
            "an engine actor was lost (%s): %d of %d lost so far, %d ready; its calls go to "
            "the others, and a replacement starts where the cluster has room",
            first_line(error),
            lost,
            len(self._slots),
            ready,
        )
        with contextlib.suppress(Exception):  # (it may be gone with its node already)
            ray.kill(slot.actor, no_restart=True)
        if replace:
            self._add_actor()

    def _arm(self) -> None:
        """Under the lock: calls wait; stop waiting after `wait_seconds` with none ready."""
        if self._timer is None:
            self._timer = threading.Timer(self._wait_seconds, self._give_up)
            self._timer.daemon = True
            self._timer.start()

    def _disarm(self) -> None:
        """Under the lock: nothing waits any more."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _give_up(self) -> None:
        """No actor was ready for `wait_seconds`: the waiting calls fail, and so do the next."""
        message = self._lost_message()
        with self._lock:
            if self._timer is not threading.current_thread():  # one got ready meanwhile
                return
            self._timer = None
            self._stopped = message
            self._ready.notify_all()
            waiting = list(self._waiting)
            self._waiting.clear()
        for call in waiting:
            _settle_error(call.result, EngineActorsLostError(message))

    def _lost_message(self) -> str:
        with self._lock:
            lost = sum(slot.lost for slot in self._slots)
        return (
            f"no engine actor was ready for {self._wait_seconds:g} s: {lost} lost (a node or "
            f"its process gone), and the cluster placed no replacement of "
            f"{self._replica_cpus:g} CPU(s) ({free_cpus():g} CPUs free); "
            f"{self._resume_hint()}"
        )

    def _resume_hint(self) -> str:
        hint = "the parts written so far are kept: the same command resumes after them"
        return f"{hint} ({self._resume})" if self._resume else hint

    def close(self) -> None:
        """Close the ready actors' engines, then stop every actor this pool started."""
        with self._lock:
            self._stopped = self._stopped or "the job's engine actors were stopped"
            self._disarm()
            self._ready.notify_all()
            slots = list(self._slots)
            waiting = list(self._waiting)
            self._waiting.clear()
        for call in waiting:
            _settle_error(call.result, EngineActorsLostError(self._stopped))
        closing = [slot.actor.close.remote() for slot in slots if slot.ready and not slot.lost]
        with contextlib.suppress(Exception):  # (an actor lost meanwhile is killed below)
            ray.get(closing, timeout=30)
        for slot in slots:
            with contextlib.suppress(Exception):
                ray.kill(slot.actor, no_restart=True)
        self._follow_ups.shutdown(wait=False, cancel_futures=True)


def _settle_error(result: Future[Any], error: BaseException) -> None:
    with contextlib.suppress(Exception):  # (a cancel may win the race)
        result.set_exception(error)
