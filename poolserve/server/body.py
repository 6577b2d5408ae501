"""Reading and validating request bodies: small ones inline, large ones in the CPU pool.

Routes read the raw body themselves (instead of letting FastAPI parse it) so that a large body is
parsed off the event loop and so that malformed JSON is a 400 in the OpenAI error shape.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from poolserve.engine.cpu_pool import CpuPool
from poolserve.errors import InvalidRequestError
from poolserve.server.errors import validation_message

M = TypeVar("M", bound=BaseModel)

# Below this size, parsing costs less than the hop to the CPU pool and back.
INLINE_PARSE_BYTES = 16 * 1024


def validate_body(schema: type[M], body: bytes) -> M:
    try:
        return schema.model_validate_json(body)
    except ValidationError as exc:
        if any(error.get("type") == "json_invalid" for error in exc.errors()):
            raise InvalidRequestError(
                f"the request body is not valid JSON: {exc.errors()[0].get('msg')}"
            ) from None
        message, param = validation_message(exc, schema)
        raise InvalidRequestError(message, param=param) from None


async def read_body(request: Request) -> bytes:
    """The whole body, not kept on the request (`Request.body()` would keep it until the response
    is sent; parsed, it is garbage)."""
    chunks = [chunk async for chunk in request.stream() if chunk]
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def parse_body(request: Request, schema: type[M], cpu: CpuPool) -> M:
    body = await read_body(request)
    if not body:
        raise InvalidRequestError("the request has no body; send a JSON object")
    if len(body) <= INLINE_PARSE_BYTES:
        return validate_body(schema, body)
    return await cpu.run(validate_body, schema, body)


def json_body_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` that documents a body the route reads itself.

    The schema's local `$defs` are inlined: OpenAPI has no `#/$defs` of its own, so a reference
    to one would dangle in /openapi.json (our wire schemas are not recursive).
    """
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

    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline(json_schema)}},
        }
    }
