"""Turning exceptions into OpenAI-style error responses: `{"error": {message, type, param, code}}`.

Client mistakes get their 4xx with a message that says how to fix them; anything unexpected is
logged with its traceback and answered with a 500 that carries no internals.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from poolserve.errors import PoolserveError
from poolserve.models.kinds import describe

logger = logging.getLogger(__name__)

_TYPES_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
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


def validation_message(error: ValidationError | RequestValidationError) -> tuple[str, str | None]:
    """One readable sentence for all of a validation error's problems, and the first field."""
    problems = []
    first_param: str | None = None
    for detail in error.errors():
        location = [str(part) for part in detail.get("loc", ()) if part != "body"]
        # Union members add their type name to the location; it says nothing to a client.
        location = [part for part in location if not part.startswith(("str", "list[", "int"))]
        param = ".".join(location) or None
        first_param = first_param or param
        message = str(detail.get("msg", "is invalid")).removeprefix("Value error, ")
        problems.append(f"{param}: {message}" if param else message)
    unique = list(dict.fromkeys(problems))
    return "; ".join(unique) or "the request body is invalid", first_param


def _no_such_route(request: Request) -> str:
    """Name what the loaded model does serve, since pooling routes depend on the model."""
    serving = getattr(request.app.state, "serving", None)
    if serving is None:
        return f"no route {request.url.path}"
    return (
        f"{request.url.path} is not served here: the model is {describe(serving.engine.kind)}, "
        f"which serves {', '.join(serving.engine.tasks.routes)} "
        "(and /tokenize, /detokenize, /v1/models, /health, /version, /metrics)"
    )


def poolserve_error_response(request: Request, exc: PoolserveError) -> Response:
    if exc.status == 500:  # the model failed; overload, timeouts and 503s are expected
        logger.error("request %s failed: %s", request.url.path, exc.message)
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
        if exc.status_code == 404:
            return error_response(404, _no_such_route(request))
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        logger.exception("unexpected error on %s", request.url.path)
        return error_response(500, "internal server error; the server log has the details")
