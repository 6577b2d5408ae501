"""The serving step every front end shares (HTTP's template, the gRPC servicer): a translated
request's context (its lane, its vectors' spaces), its time limit, and its run on the model's
engine within that limit, cancelled when the caller goes or the shutdown's grace period ends.

What a caller asks beside its body comes from HTTP headers or gRPC metadata under the same
names (`Asked`); errors are raised as PoolserveErrors, which each front end answers in its own
form (an HTTP status, a gRPC status code).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from poolserve.admission.asked import Asked
from poolserve.admission.tickets import Ticket
from poolserve.engine.context import ServeContext
from poolserve.engine.lanes import header_priority, request_priority
from poolserve.engine.pipeline import begin
from poolserve.errors import (
    ConflictError,
    EngineUnavailableError,
    InvalidRequestError,
    RequestTimeoutError,
)
from poolserve.observe.metrics import Metrics
from poolserve.service.model_service import ModelService
from poolserve.serving.serving_state import ServingState
from poolserve.tasks.quantize import embedding_type

# A body (or gRPC message) of at most this many bytes is parsed on the loop: below it, parsing
# costs less than the hop to the CPU pool and back.
INLINE_PARSE_BYTES = 16 * 1024

T = TypeVar("T")


@dataclass(frozen=True)
class Vectors:
    """The vectors a request answers: of which output (`embed`, `token_embed`, `sparse`), in
    which types, as the request names them (float32, base64, int8, ubinary, ...), in order."""

    head: str = "embed"
    types: tuple[str, ...] = ("float",)


@dataclass
class Step:
    """One request through the step: where it was admitted, its id and its context once made
    (tracing and the answer's headers read them)."""

    state: ServingState
    ticket: Ticket | None
    request_id: str
    asked: Asked = field(default_factory=Asked)
    # When the caller's own deadline passes (a gRPC call's; time.monotonic), if it has one.
    deadline: float | None = None

    def door_wait(self) -> float | None:
        """The most the request may wait at the door: what its asked time limit or its
        deadline leave."""
        left = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        return min((t for t in (self.asked.door_wait(), left) if t is not None), default=None)


def time_limit(step: Step, in_body: float | None) -> float | None:
    """The server's request timeout, or a shorter one the caller asks for (header, metadata or
    body field), in seconds from the request's admission."""
    asked = step.asked
    limits = [t for t in (step.state.request_timeout, in_body) if t is not None]
    limit = min(limits) if limits else None
    if asked.timeout is not None:
        try:
            seconds = float(asked.timeout)
        except ValueError:
            raise InvalidRequestError(
                f"x-request-timeout must be a number of seconds, got {asked.timeout[:64]!r}"
            ) from None
        if not 0 < seconds < float("inf"):
            raise InvalidRequestError("x-request-timeout must be a finite number of seconds > 0")
        limit = seconds if limit is None else min(limit, seconds)
    return limit


def context_for(
    step: Step,
    service: ModelService,
    internal: Any,
    params: Any,
    priority: int | None,
    vectors: Vectors | None,
) -> ServeContext[Any]:
    """The request's context: in the lane its body's `priority` or its `x-priority` names
    (engine/lanes.py; its ticket moved there), with the fingerprints of its vectors' spaces
    (`spaces_for`)."""
    lane = request_priority(priority, header_priority(step.asked.priority))
    if step.ticket is not None and step.ticket.priority != lane:  # (else it is there)
        step.state.admission.relane(step.ticket, lane)
    ctx = ServeContext(
        internal,
        model_name=service.served_name,
        pooling_params=params,
        request_id=step.request_id,
        cost_meter=step.ticket,
        priority=lane,
    )
    if vectors is not None:
        ctx.embedding_spaces = spaces_for(service, params, vectors, step.asked.expect_space)
    return ctx


def spaces_for(
    service: ModelService, params: Any, vectors: Vectors, expected: str | None
) -> dict[str, str]:
    """The fingerprints of the request's vectors' spaces by the type it asks for; a 409 when
    the caller expects others (`x-expect-embedding-space`: one fingerprint, or several as the
    answer lists them; every space the answer would carry must be among them). The dict is
    shared by the requests of the same options: read it, never write to it."""
    spaces: dict[str, str] = service.remembered(
        ("spaces", params, vectors),
        lambda: {
            kind: service.embedding_space(vectors.head, params, embedding_type(kind))
            for kind in vectors.types
        },
    )
    if expected is None:
        return spaces
    allowed = {each.strip() for each in expected.split(",")}
    if not set(spaces.values()) <= allowed:
        raise ConflictError(
            f"this request's vectors would be in embedding space {', '.join(spaces.values())} "
            f"({service.served_name}, {params.dimensions or service.embedding_dim} dimensions, "
            f"{'normalized' if params.normalize else 'not normalized'}, "
            f"{', '.join(vectors.types)}), not {expected[:64]!r} as x-expect-embedding-space "
            "says: the model, its pooling or the request's options differ from those the "
            "expected vectors were made with; nothing was run"
        )
    return spaces


def answer_metadata(ctx: ServeContext[Any]) -> dict[str, str]:
    """The headers (HTTP) or initial metadata (gRPC) of an answer: its id, its timings and its
    vectors' spaces."""
    timings = ctx.timings
    answer = {
        "x-request-id": ctx.request_id,
        "x-queue-time": f"{timings.queue * 1000:.3f}",
        "x-inference-time": f"{timings.inference * 1000:.3f}",
        "x-total-time": f"{timings.total * 1000:.3f}",
    }
    if ctx.embedding_spaces:
        answer["x-embedding-space"] = ", ".join(ctx.embedding_spaces.values())
    return answer


def body_only(ctx: ServeContext[Any], body: bytes) -> bytes:
    """The answer that is the encoded body alone."""
    return body


def _answered(
    metrics: Metrics,
    answer: Callable[[ServeContext[Any], bytes], T],
    ctx: ServeContext[Any],
    body: bytes,
) -> T:
    """In the CPU pool, once the request's timings are complete: its stages observed, and the
    front end's answer made of its body. (A request whose caller goes, or whose time runs out,
    while this runs is counted in the stages too: its work was all done.)"""
    metrics.observe_stages(ctx)
    return answer(ctx, body)


async def run_served(
    step: Step,
    service: ModelService,
    served: Any,
    ctx: ServeContext[Any],
    answer: Callable[[ServeContext[Any], bytes], T],
    gone: Callable[[], Awaitable[Any]] | None = None,
) -> T | None:
    """Run `ctx`'s request through `served.task` on `service`'s engine, encoded by
    `served.encode`; `answer(ctx, body)`, made in the CPU pool so the loop only sends it (the
    body alone: `body_only`), or None if the caller went first (`gone()` returned).

    The time limit counts from the request's admission; the caller's deadline is its own. If
    the caller goes, either passes or the server's grace period ends first, the request's work
    is cancelled: its items still queued never reach the model. Cancelled itself (a gRPC call's
    caller went), it cancels the work too. The loop awaits the answer's future alone
    (answer_waits.py)."""
    state = step.state
    limit = time_limit(step, served.timeout)
    now = time.monotonic()
    limit_wait = limit
    if limit is not None and step.ticket is not None:
        limit_wait = max(0.0, limit - (now - step.ticket.admitted_at))
    deadline_wait = None if step.deadline is None else max(0.0, step.deadline - now)
    wait = min((t for t in (limit_wait, deadline_wait) if t is not None), default=None)
    made = partial(_answered, state.metrics, answer)
    pending, group = begin(service.core, served.task, ctx, served.encode, made)
    race = state.waits.begin(pending, wait, state.grace.over(), gone)
    try:
        return await pending
    except asyncio.CancelledError:
        group.cancel()
        if race.why is None:  # this call itself was cancelled
            raise
    except BaseException:
        group.cancel()
        raise
    finally:
        state.waits.end(race)
    if race.why == "gone":
        return None
    if race.why == "grace":
        raise EngineUnavailableError("the server shut down before this request finished; retry it")
    if limit is None or (deadline_wait is not None and deadline_wait < (limit_wait or 0.0)):
        raise RequestTimeoutError(
            "the call's deadline passed before it was answered; its work was cancelled"
        )
    raise RequestTimeoutError(
        f"the request took longer than its time limit ({limit:g} s) and was cancelled; "
        "send less per request, or allow more time (request_timeout, x-request-timeout, "
        "--request-timeout)"
    )
