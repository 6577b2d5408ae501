"""What every route handler does around the template: find the shared state, serve a task, answer
with the body and the timing headers."""

from __future__ import annotations

from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from poolserve.server.state import ServingState
from poolserve.tasks.base import PoolingParams, ServeContext, Task, serve

RequestT = TypeVar("RequestT")


def state_of(request: Request) -> ServingState:
    state: ServingState = request.app.state.serving
    return state


def json_response(body: bytes, headers: dict[str, str] | None = None) -> Response:
    return Response(body, media_type="application/json", headers=headers)


def timing_headers(ctx: ServeContext[Any]) -> dict[str, str]:
    timings = ctx.timings
    return {
        "x-request-id": ctx.request_id,
        "x-queue-time": f"{timings.queue * 1000:.3f}",
        "x-inference-time": f"{timings.inference * 1000:.3f}",
        "x-total-time": f"{timings.total * 1000:.3f}",
    }


async def serve_task(
    request: Request,
    task: Task[RequestT, Any],
    internal: RequestT,
    params: PoolingParams,
) -> Response:
    """Run `internal` through `task` on the engine; the response carries timing headers."""
    state = state_of(request)
    ctx = ServeContext(
        internal,
        model_name=state.model_name,
        pooling_params=params,
        request_id=request.headers.get("x-request-id") or state.new_request_id(),
    )
    body = await serve(state.engine.core, task, ctx)
    return json_response(body, timing_headers(ctx))
