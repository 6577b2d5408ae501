"""One Python API method, three ways to call it: blocking, awaited, or queued for a future.

Each `Engine` method is written once, as a builder that checks its arguments and returns the
request it makes (builders.py; `Prepared`: the task, its context, and what turns the task's
result into the method's). `blocking`, `awaited` and `later` make the three methods from that one
builder (as
httpx builds its sync and async clients from one request model), with its signature, so an
option is declared once and the three cannot drift.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

from poolserve.engine.context import ServeContext, Task
from poolserve.engine.engine_core import EngineCore
from poolserve.engine.pipeline import run_async, run_sync, submit
from poolserve.engine.work import RequestGroup

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def _same(result: Any) -> Any:
    return result


@dataclass(frozen=True)
class Prepared(Generic[R]):
    """A method's request: `task` over `ctx`, its result turned into the method's by `then`."""

    task: Task[Any, Any]
    ctx: ServeContext[Any]
    then: Callable[[Any], R] = _same


class HasCore(Protocol):
    @property
    def core(self) -> EngineCore: ...


E = TypeVar("E", bound=HasCore)


def _named(
    method: Callable[..., Any], build: Callable[..., Any], name: str, doc: str, returns: str
) -> None:
    """`method` named `name` as an `Engine` method, documented by `doc`, with the builder's
    parameters (its first, the engine, as `self`) and, for `help()`, the return annotation
    `returns` (`{}` the builder's result type)."""
    functools.update_wrapper(method, build)
    method.__name__ = name
    method.__qualname__ = f"Engine.{name}"
    method.__module__ = "poolserve.offline.model_engine"
    method.__doc__ = doc
    signature = inspect.signature(build)
    first, *rest = signature.parameters.values()
    result = str(signature.return_annotation).removeprefix("Prepared[").removesuffix("]")
    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[first.replace(name="self", annotation=inspect.Parameter.empty), *rest],
        return_annotation=returns.format(result),
    )


def blocking(
    build: Callable[Concatenate[E, P], Prepared[R]], name: str
) -> Callable[Concatenate[E, P], R]:
    """The method that runs the request and returns its result (the builder's docstring)."""

    def method(self: E, /, *args: P.args, **kwargs: P.kwargs) -> R:
        prepared = build(self, *args, **kwargs)
        return prepared.then(run_sync(self.core, prepared.task, prepared.ctx))

    _named(method, build, name, build.__doc__ or "", "{}")
    return method


def awaited(
    build: Callable[Concatenate[E, P], Prepared[R]], name: str, of: str
) -> Callable[Concatenate[E, P], Coroutine[Any, Any, R]]:
    """The async twin of the method `of`: the work runs on the engine's threads and the
    event loop only awaits it."""

    async def method(self: E, /, *args: P.args, **kwargs: P.kwargs) -> R:
        prepared = build(self, *args, **kwargs)
        return prepared.then(await run_async(self.core, prepared.task, prepared.ctx))

    _named(method, build, name, f"`{of}`, awaited.", "{}")
    return method


def later(
    build: Callable[Concatenate[E, P], Prepared[R]], name: str, of: str
) -> Callable[Concatenate[E, P], Future[R]]:
    """The method that queues `of`'s request and returns at once: a future of its result, whose
    cancel() drops the inputs that have not reached the model."""

    def method(self: E, /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        prepared = build(self, *args, **kwargs)
        finished, group = submit(self.core, prepared.task, prepared.ctx)
        if prepared.then is _same:
            return cancellable(finished, group)
        result: Future[R] = Future()

        def finish(done: Future[Any]) -> None:
            if result.done():  # cancelled by its caller, which cancelled the request too
                return
            if done.cancelled():
                result.cancel()
            elif (error := done.exception()) is not None:
                result.set_exception(error)
            else:
                try:
                    result.set_result(prepared.then(done.result()))
                except Exception as exc:  # the method's own check of the result
                    result.set_exception(exc)

        finished.add_done_callback(finish)
        result.add_done_callback(lambda done: group.cancel() if done.cancelled() else None)
        return result

    _named(
        method,
        build,
        name,
        f"Queue `{of}` and return at once: a future of its result. Cancelling the future drops "
        "the inputs that have not reached the model.",
        "Future[{}]",
    )
    return method


def cancellable(future: Future[T], group: RequestGroup) -> Future[T]:
    """`future`, whose cancel() also drops the request's inputs not yet run."""
    future.add_done_callback(lambda done: group.cancel() if done.cancelled() else None)
    return future
