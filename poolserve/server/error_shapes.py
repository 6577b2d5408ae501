"""The shapes API families answer errors in, each as its documented body and how it is written.

OpenAI's `{"error": {message, type, param, code}}` is every route's by default (and what the
door refuses with: 401 always, 413 and 429 before a body is read); a family with its own declares
its `ErrorShape` (text-embeddings-inference's here, beside OpenAI's; Voyage AI's in its module),
and its endpoints answer in it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel
from starlette.requests import Request

from poolserve.server.errors import ErrorRender, answer_errors_with, tei_error_response
from poolserve.server.schemas import ErrorBody, TeiErrorBody


@dataclass(frozen=True)
class ErrorShape:
    """An API family's errors: their body as the OpenAPI document gives it, and how to write
    one (None: OpenAI's, the default)."""

    body: type[BaseModel]
    render: ErrorRender | None = None


OPENAI_ERRORS = ErrorShape(ErrorBody)
TEI_ERRORS = ErrorShape(TeiErrorBody, tei_error_response)


def answer_errors_as(request: Request, shape: ErrorShape) -> None:
    """From here on, `request`'s errors take `shape`."""
    if shape.render is not None:
        answer_errors_with(request, shape.render)
