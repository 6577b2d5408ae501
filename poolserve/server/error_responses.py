"""Turning exceptions into error responses: OpenAI's `{"error": {message, type, param, code}}`,
or the shape of the API family a route belongs to (`ErrorShape`: text-embeddings-inference's and
Voyage AI's are declared in their modules under `server/apis/`).

OpenAI's is every route's by default (and what the door refuses with: 401 always, 413 and 429
before a body is read). Client mistakes get their 4xx with a message that says how to fix them;
anything unexpected is logged with its traceback and answered with a 500 that carries no
internals.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.errors import InputTooLongError, PoolserveError
from poolserve.models.kinds import describe
from poolserve.server.protocol import IGNORED_FIELDS

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


def validation_message(
    error: ValidationError | RequestValidationError, schema: type[BaseModel] | None = None
) -> tuple[str, str | None]:
    """One readable sentence per field in error, and the first field.

    A field whose value matches no member of a union (pydantic reports each member's failure)
    is described once, by the field's description: "input must be a string, an array of
    strings, ...; got a number". An unknown field names the nearest known one.
    """
    details = [detail for detail in error.errors() if detail.get("type") != "json_invalid"]
    by_field: dict[str, list[tuple[list[str | int], Any]]] = {}
    for detail in details:
        extra = detail.get("type") == "extra_forbidden"
        location = _client_location(detail.get("loc", ()), keep_last=extra)
        field = str(location[0]) if location else ""
        unknown = extra and len(location) == 1
        by_field.setdefault(field, []).append((location, _UNKNOWN if unknown else detail))
    problems = [_problem(field, found, schema) for field, found in by_field.items()]
    first = next(iter(by_field), None) or None
    return "; ".join(dict.fromkeys(problems)) or "the request body is invalid", first


_UNKNOWN = object()


def _client_location(loc: Any, *, keep_last: bool = False) -> list[str | int]:
    """The error's path as the client wrote it: without FastAPI's "body" and without the union
    member names pydantic inserts (`str`, `list[int]`, `RerankDocument`). With `keep_last`
    (an unknown key: the client's own, whatever it looks like) the last part always stays."""
    parts: list[str | int] = []
    loc = [part for part in loc if part != "body"]
    for index, part in enumerate(loc):
        last = keep_last and index == len(loc) - 1
        if (
            not last
            and isinstance(part, str)
            and (part[:1].isupper() or part.startswith(_TYPE_TAGS))
        ):
            continue
        parts.append(part)
    return parts


_TYPE_TAGS = ("str", "list[", "int", "float", "bool", "function-", "constrained-", "literal[")


def _path(location: list[str | int]) -> str:
    """`documents[0].text`"""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _last_index(location: list[str | int]) -> int:
    return location[-1] if location and isinstance(location[-1], int) else -1


def _furthest(found: list[tuple[list[str | int], Any]]) -> tuple[list[str | int], Any]:
    """Of a union's failures, the first failure of the member that read furthest: it names
    the value at fault. For [101, 1.5, 102], the token ids' member first fails at input[1]; the
    strings' member fails at every item, first at input[0]."""
    by_member: dict[str, list[tuple[list[str | int], Any]]] = {}
    for location, detail in found:
        tags = [
            part
            for part in detail.get("loc", ())
            if isinstance(part, str) and (part[:1].isupper() or part.startswith(_TYPE_TAGS))
        ]
        by_member.setdefault(tags[0] if tags else "", []).append((location, detail))
    firsts = [
        min(failures, key=lambda item: (_last_index(item[0]), len(item[0])))
        for failures in by_member.values()
    ]
    return max(firsts, key=lambda item: (len(item[0]), _last_index(item[0])))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float) and not value.is_integer():
        return f"{value}, not a whole number"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _problem(
    field: str, found: list[tuple[list[str | int], Any]], schema: type[BaseModel] | None
) -> str:
    known = sorted(
        (schema.model_fields if schema is not None else {}),
        key=lambda name: name in IGNORED_FIELDS or name in ("request_timeout", "priority"),
    )
    if found[0][1] is _UNKNOWN:
        # The first few, each by a bounded prefix: a body may send thousands of long keys.
        every = sorted({_path(location) for location, _ in found})
        unknown = [name if len(name) <= 64 else f"{name[:64]}..." for name in every[:5]]
        near = [get_close_matches(str(name).split(".")[-1], known, n=1) for name in unknown]
        hints = [f"; did you mean `{match[0]}`?" if match else "" for match in near]
        own = [name for name in known if name not in IGNORED_FIELDS]
        listed = f" (this route takes: {', '.join(own)})" if own else ""
        more = f"; and {len(every) - 5} more unknown fields" if len(every) > 5 else ""
        return (
            "; ".join(
                f"unknown field `{name}`{hint}" for name, hint in zip(unknown, hints, strict=True)
            )
            + more
            + listed
        )
    field_info = schema.model_fields.get(field) if schema is not None else None
    described = field_info.description if field_info is not None else None
    if len(found) > 1 and described:
        # A union: every member failed. Say what the field takes, and what it got where (the
        # deepest value a member looked at, so `[1, 2]` for strings names its first number).
        kinds = {item[1].get("type"): item for item in found}
        if "extra_forbidden" in kinds:
            return f"{field} must be {described}; {_path(kinds['extra_forbidden'][0])} is unknown"
        present = [item for item in found if item[1].get("type") != "missing"] or found
        location, detail = _furthest(present)
        where = _path(location) or field
        return f"{field} must be {described}; {where} is {_json_type(detail.get('input'))}"
    problems = []
    for location, detail in found:
        message = str(detail.get("msg", "is invalid")).removeprefix("Value error, ")
        if detail.get("type") == "extra_forbidden":
            message = "unknown field"
        where = _path(location)
        if detail.get("type") == "too_short" and detail.get("input") == [] and where:
            problems.append(f"{where} is an empty array; send at least one item")
            continue
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(dict.fromkeys(problems))


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


# An error in an API family's own shape: (status, message, headers) → the response.
ErrorRender = Callable[[int, str, Mapping[str, str] | None], Response]
# Set in a request's scope by a handler whose API family answers errors in its own shape
# (server/error_responses.py); absent, they take OpenAI's.
ERROR_RENDER = "poolserve.error_render"


@dataclass(frozen=True)
class ErrorShape:
    """An API family's errors: their body as the OpenAPI document gives it, and how to write
    one (None: OpenAI's, the default)."""

    body: type[BaseModel]
    render: ErrorRender | None = None


def answer_errors_as(request: Request, shape: ErrorShape) -> None:
    """From here on, `request`'s errors take `shape` (OpenAI's unless it renders its own)."""
    if shape.render is not None:
        request.scope[ERROR_RENDER] = shape.render


def _family_error(
    request: Request, status: int, message: str, headers: Mapping[str, str] | None = None
) -> Response | None:
    """The error in the shape the request's family answers in, unless that is OpenAI's."""
    render: ErrorRender | None = request.scope.get(ERROR_RENDER)
    return render(status, message, headers) if render is not None else None


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
