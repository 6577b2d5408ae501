"""Reading and validating request bodies: small ones inline, large ones in the CPU pool.

Routes read the raw body themselves (instead of letting FastAPI parse it) so that a large body is
parsed off the event loop and so that malformed JSON is a 400 in the OpenAI error shape.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json
from starlette.requests import ClientDisconnect, Request
from starlette.types import Scope

from poolserve.apis.validation_messages import validation_message
from poolserve.engine.cpu_pool import CpuPool
from poolserve.errors import InvalidRequestError, PayloadTooLargeError, UnsupportedMediaTypeError
from poolserve.server.middleware.admission_door import asked_priority
from poolserve.serving.serving_step import INLINE_PARSE_BYTES

M = TypeVar("M", bound=BaseModel)


def not_json(body: bytes, detail: str) -> InvalidRequestError:
    """Why `body` is not JSON, in terms of what was sent: text in another encoding than UTF-8,
    a form, or else the parser's `detail`."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return InvalidRequestError(
            f"the request body is not UTF-8 (byte {body[exc.start]:#04x} at position "
            f"{exc.start}); send JSON encoded as UTF-8"
        )
    start = body.lstrip()[:2]
    if start == b"--" and b"content-disposition" in body[:1024].lower():
        return InvalidRequestError(
            "the request body is multipart form data; send a JSON object with "
            "Content-Type: application/json"
        )
    if start[:1] not in (b"{", b"[", b'"') and b"=" in body[:256] and b"{" not in body[:256]:
        return InvalidRequestError(
            "the request body looks like a form (key=value); send a JSON object with "
            "Content-Type: application/json"
        )
    return InvalidRequestError(f"the request body is not valid JSON: {detail}")


def check_object(data: Any) -> None:
    """Refuse a body that is valid JSON but not an object."""
    if isinstance(data, dict):
        return
    kind = (
        "null"
        if data is None
        else "a boolean"
        if isinstance(data, bool)
        else "a number"
        if isinstance(data, int | float)
        else "a string"
        if isinstance(data, str)
        else "an array"
    )
    raise InvalidRequestError(
        f"the request body is {kind}; send a JSON object ({{...}}) with this route's fields"
    ) from None


def validate_body(schema: type[M], body: bytes) -> M:
    try:
        return schema.model_validate_json(body)
    except ValidationError as exc:
        if any(error.get("type") == "json_invalid" for error in exc.errors()):
            raise not_json(body, str(exc.errors()[0].get("msg"))) from None
        whole = [error for error in exc.errors() if not error.get("loc")]  # the body itself
        if whole:
            check_object(whole[0].get("input"))
        message, param = validation_message(exc, schema)
        raise InvalidRequestError(message, param=param) from None


@dataclass(frozen=True)
class Refusal:
    """Why a body was refused, raised by the caller as an `InvalidRequestError`.

    Errors here are raised where they are made, never kept in a local first: a frame that holds
    its own exception (and the body) in a local is tied to it through the traceback, a cycle
    that only the garbage collector frees, every so many allocations, while refused bodies of
    megabytes wait."""

    message: str
    param: str | None


def validate_chosen(choose: Callable[[Any], type[M]], body: bytes) -> tuple[type[M], M | Refusal]:
    """The schema `choose` picks from the body's parsed JSON (for routes that serve two API
    families' shapes, told apart by their fields), and the body validated by it or why not."""
    try:
        # pydantic's JSON reader, as `validate_body`'s: every route reads a body alike.
        data = from_json(body)
    except ValueError as exc:
        raise not_json(body, str(exc)) from None
    check_object(data)
    schema = choose(data)
    try:
        return schema, schema.model_validate(data)
    except ValidationError as exc:
        return schema, Refusal(*validation_message(exc, schema))


async def parse_chosen_body(
    request: Request,
    choose: Callable[[Any], type[M]],
    cpu: CpuPool,
    chosen: Callable[[type[M]], None] = lambda schema: None,
) -> M:
    """`parse_body` with the schema chosen by the body (`validate_chosen`); `chosen` is told
    which, before any error about the body is raised (it decides the error's shape)."""
    body = await read_json_body(request, cpu)
    if not body:
        raise InvalidRequestError("the request has no body; send a JSON object")
    if len(body) <= INLINE_PARSE_BYTES:
        schema, result = validate_chosen(choose, body)
    else:
        schema, result = await cpu.run_at(
            asked_priority(request.scope), validate_chosen, choose, body
        )
    chosen(schema)
    if isinstance(result, Refusal):
        raise InvalidRequestError(result.message, param=result.param)
    return result


def header(scope: Scope, name: bytes) -> str:
    """A request header's value ("" if it has none; `name` lowercase, as ASGI gives names), read
    from the scope without building starlette's `Headers` for it."""
    for key, value in scope.get("headers", ()):
        if key == name:
            decoded: str = value.decode("latin-1")
            return decoded
    return ""


async def read_body(request: Request) -> bytes:
    """The whole body, not kept on the request (`Request.body()` would keep it until the response
    is sent; parsed, it is garbage). Read from the messages themselves: a one-message body (almost
    all) costs one await, not an async generator's."""
    chunks: list[bytes] = []
    while True:
        message = await request.receive()
        if message["type"] != "http.request":  # the client went before its body came
            raise ClientDisconnect
        if chunk := message.get("body", b""):
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def gunzip(body: bytes, limit: int) -> bytes:
    """A gzipped body, decompressed to at most `limit` bytes (0: no limit): a small body that
    inflates past the request size limit is refused like a large one (413)."""
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = decompressor.decompress(body, limit + 1 if limit else 0)
    except zlib.error as exc:
        raise InvalidRequestError(f"the request body is not valid gzip: {exc}") from None
    if limit and (len(data) > limit or decompressor.unconsumed_tail):
        raise PayloadTooLargeError(
            f"the request body is larger than this server accepts once decompressed ({limit} "
            "bytes); split the request, or start the server with a larger --max-request-bytes"
        )
    if not decompressor.eof:
        raise InvalidRequestError(
            "the request body's gzip stream is cut short (Content-Encoding: gzip); send the "
            "whole gzipped body"
        )
    return data


async def read_json_body(request: Request, cpu: CpuPool) -> bytes:
    """The body as JSON bytes: as sent, or gunzipped (in the CPU pool) when its
    `Content-Encoding` says gzip; any other encoding is a 415."""
    body = await read_body(request)
    encoding = header(request.scope, b"content-encoding").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip"):
        raise UnsupportedMediaTypeError(
            f"Content-Encoding {encoding!r} is not supported; send the body as is or gzipped"
        )
    limit = int(getattr(request.app.state.serving, "max_request_bytes", 0))
    return await cpu.run_at(asked_priority(request.scope), gunzip, body, limit)


async def parse_body(request: Request, schema: type[M], cpu: CpuPool) -> M:
    body = await read_json_body(request, cpu)
    if not body:
        raise InvalidRequestError("the request has no body; send a JSON object")
    if len(body) <= INLINE_PARSE_BYTES:
        return validate_body(schema, body)
    return await cpu.run_at(asked_priority(request.scope), validate_body, schema, body)


def json_body_schema(*schemas: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` that documents a body the route reads itself (one of `schemas`, where a
    route serves two API families' shapes).

    The schema's local `$defs` are inlined: OpenAPI has no `#/$defs` of its own, so a reference
    to one would dangle in /openapi.json (our wire schemas are not recursive).
    """

    def inlined(schema: type[BaseModel]) -> Any:
        json_schema = schema.model_json_schema()
        definitions = json_schema.pop("$defs", {})

        def inline(node: Any) -> Any:
            if isinstance(node, dict):
                reference = node.get("$ref", "")
                if isinstance(reference, str) and reference.startswith("#/$defs/"):
                    return inline(definitions[reference.removeprefix("#/$defs/")])
                return {key: inline(value) for key, value in node.items()}
            if isinstance(node, list):
                return [inline(value) for value in node]
            return node

        return inline(json_schema)

    documented = [inlined(schema) for schema in schemas]
    schema = documented[0] if len(documented) == 1 else {"anyOf": documented}
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema}},
        }
    }
