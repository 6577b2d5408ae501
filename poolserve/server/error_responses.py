"""Turning exceptions into error responses: OpenAI's `{"error": {message, type, param, code}}`,
or the shape of the API family a route belongs to (`ErrorShape`: text-embeddings-inference's and
Voyage AI's are declared in their modules under `apis/`).

OpenAI's is every route's by default (and what the door refuses with: 401 always, 413 and 429
before a body is read). Client mistakes get their 4xx with a message that says how to fix them;
anything unexpected is logged with its traceback and answered with a 500 that carries no
internals.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.apis.declarations import ErrorRender, ErrorShape
from poolserve.apis.validation_messages import validation_message
from poolserve.errors import InputTooLongError, PoolserveError
from poolserve.models.kinds import describe

logger = logging.getLogger(__name__)

_TYPES_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


def error_response(
    status: int,
    message: str,
    *,
    error_type: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    body = {
        "error": {
            "message": message,
            "type": error_type or _TYPES_BY_STATUS.get(status, "internal_server_error"),
            "param": param,
            "code": status,
        }
    }
    return Response(
        orjson.dumps(body), status_code=status, media_type="application/json", headers=headers
    )


def _no_such_route(request: Request) -> str:
    """Name what the served models do serve, since pooling routes depend on the model."""
    serving = getattr(request.app.state, "serving", None)
    if serving is None:
        return f"no route {request.method} {request.url.path}"
    served = "; ".join(
        f"{service.served_name!r} is {describe(service.kind)}, which serves " + ", ".join(routes)
        for service, routes in zip(serving.models, serving.model_routes, strict=True)
    )
    return (
        f"{request.method} {request.url.path} is not served here: {served} "
        "(and /tokenize, /detokenize, /v1/models, /health, /version, /metrics)"
    )


# Set in a request's scope by a handler whose API family answers errors in its own shape
# (`answer_errors_as`); absent, they take OpenAI's.
ERROR_RENDER = "poolserve.error_render"


def answer_errors_as(request: Request, shape: ErrorShape) -> None:
    """From here on, `request`'s errors take `shape` (OpenAI's unless it renders its own)."""
    if shape.render is not None:
        request.scope[ERROR_RENDER] = shape.render


def _family_error(
    request: Request, status: int, message: str, headers: Mapping[str, str] | None = None
) -> Response | None:
    """The error in the shape the request's family answers in, unless that is OpenAI's."""
    render: ErrorRender | None = request.scope.get(ERROR_RENDER)
    if render is None:
        return None
    return Response(
        render(status, message), status_code=status, media_type="application/json", headers=headers
    )


# A route of another API family: how its request names its inputs and how to cut one.
INPUT_NAMING = "poolserve.input_naming"


def name_inputs(request: Request, field: str, cut_with: str) -> None:
    """Errors about an input of this request name it `field[index]` and say to cut it with
    `cut_with` (the route's own field), not with vLLM's `truncate_prompt_tokens`."""
    request.scope[INPUT_NAMING] = (field, cut_with)


def poolserve_error_response(request: Request, exc: PoolserveError) -> Response:
    naming = request.scope.get(INPUT_NAMING)
    if naming is not None and isinstance(exc, InputTooLongError):
        exc = exc.reworded(*naming)
    if exc.status == 500:  # the model failed; overload, timeouts and 503s are expected
        logger.error("request %s failed: %s", request.url.path, exc.message)
    family = _family_error(request, exc.status, exc.message, exc.headers)
    if family is not None:
        return family
    return error_response(
        exc.status, exc.message, error_type=exc.error_type, param=exc.param, headers=exc.headers
    )


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(PoolserveError)
    async def _poolserve_error(request: Request, exc: PoolserveError) -> Response:
        return poolserve_error_response(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        message, param = validation_message(exc)
        return error_response(400, message, param=param)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        allowed = (exc.headers or {}).get("allow", (exc.headers or {}).get("Allow", ""))
        if exc.status_code == 405 and "POST" in allowed:  # a POST route, by another method
            return error_response(
                405,
                f"{request.method} {request.url.path}: this route takes POST, with a JSON body",
                headers=exc.headers,
            )
        if exc.status_code in (404, 405):
            return error_response(exc.status_code, _no_such_route(request), headers=exc.headers)
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        return unexpected_error_response(request)


def unexpected_error_response(request: Request) -> Response:
    """A 500 for an error no handler expected, in the route's shape; logs the traceback (call
    from the `except` block)."""
    logger.exception("unexpected error on %s", request.url.path)
    message = "internal server error; the server log has the details"
    return _family_error(request, 500, message) or error_response(500, message)


class UnexpectedErrorMiddleware:
    """Answers an error no handler took with a 500 and keeps the connection open.

    Starlette's last-resort handler (the app's `Exception` handler) answers, then re-raises to
    the server, which drops the connection without saying `connection: close`: a client pool
    sends its next request there and gets a reset. Here the error stops with its own request.
    One that happens after the response has started cannot be answered, and goes on up."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception:
            if started:
                raise
            response = unexpected_error_response(Request(scope, receive))
            await response(scope, receive, send)
