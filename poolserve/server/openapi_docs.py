"""What the OpenAPI document (`/docs`, `/openapi.json`) says of a route: its answer, and what it
may answer besides, in which error shapes (the bodies themselves: apis/answer_docs.py)."""

from __future__ import annotations

import functools
import operator
from typing import Any

from pydantic import BaseModel

from poolserve.apis.answer_docs import ErrorBody
from poolserve.server.body import json_body_schema

# What every route may answer besides success, and when.
_ERRORS = {
    400: "a malformed request; the message says how to fix it",
    401: "a missing or wrong API key (with --api-key)",
    404: "an unknown model",
    409: "x-expect-embedding-space names another space than the request's vectors would be in",
    413: "a body, input count or cost over the server's limits",
    429: "the server is at capacity; retry after Retry-After seconds",
    503: "no model runner is alive, or the server is shutting down",
    504: "the request took longer than its time limit",
    500: "a server bug (its log has the traceback); the connection stays open",
}
# Statuses only some routes answer (`documented(also=...)`).
_MORE_ERRORS = {
    409: "the file or batch is not in a state that allows it",
    415: "the body is not in the encoding the route reads",
    507: "the batch folder holds as much as --max-batch-dir-bytes allows",
}


# What the door refuses before any route reads the body is in OpenAI's shape: 401 always, 413
# and 429 sometimes (later, the route's own); so is a 500 that comes before the route chose its
# family's shape (UnexpectedErrorMiddleware).
_AT_THE_DOOR = {401}
_AT_THE_DOOR_OR_LATER = {413, 429, 500}


def _error_model(bodies: tuple[type[BaseModel], ...], status: int) -> Any:
    """The documented error body of a route whose errors take these bodies' shapes (a route
    that takes several families' bodies answers in the family of the body)."""
    if status in _AT_THE_DOOR:
        bodies = (ErrorBody,)
    elif status in _AT_THE_DOOR_OR_LATER:
        bodies = (ErrorBody, *bodies)
    return functools.reduce(operator.or_, dict.fromkeys(bodies))


def documented(
    response: Any,
    request: type[BaseModel] | None = None,
    *more_requests: type[BaseModel],
    errors: type[BaseModel] | tuple[type[BaseModel], ...] = ErrorBody,
    also: tuple[int, ...] = (),
) -> dict[str, Any]:
    """Route keywords that document a request body (read by the route itself; one of several
    where the route serves several API families' shapes), responses (`response` a model, a
    union of models, or for an answer that is not JSON its OpenAPI response object) and the
    shape of its errors (a route without a body: 401, 404, 500 and those `also` names)."""
    answer = response if isinstance(response, dict) else {"model": response}
    responses: dict[int | str, dict[str, Any]] = {200: answer}
    known = {**_ERRORS, **_MORE_ERRORS}
    statuses = (
        {**_ERRORS, **{s: known[s] for s in also}}
        if request is not None
        else {s: known[s] for s in sorted({404, 401, 500, *also})}
    )
    bodies = errors if isinstance(errors, tuple) else (errors,)
    for status, description in statuses.items():
        responses[status] = {"model": _error_model(bodies, status), "description": description}
    keywords: dict[str, Any] = {"responses": responses}
    if request is not None:
        keywords["openapi_extra"] = json_body_schema(request, *more_requests)
    return keywords
