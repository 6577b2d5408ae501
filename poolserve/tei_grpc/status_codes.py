"""poolserve's errors as gRPC status codes, as text-embeddings-inference's gRPC server maps its
own: a bad request is INVALID_ARGUMENT, overload RESOURCE_EXHAUSTED, a stopped engine or a
draining server UNAVAILABLE, a passed time limit DEADLINE_EXCEEDED."""

from __future__ import annotations

import grpc

from poolserve.errors import PoolserveError

# By the HTTP status each error carries (errors.py).
_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    # The caller's x-expect-embedding-space does not hold: nothing was run.
    409: grpc.StatusCode.FAILED_PRECONDITION,
    413: grpc.StatusCode.INVALID_ARGUMENT,
    415: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


class NotServedError(PoolserveError):
    """An RPC no model here serves: FAILED_PRECONDITION (as text-embeddings-inference answers
    Rerank on an embedding model)."""

    status = 400


def code_of(error: PoolserveError) -> grpc.StatusCode:
    if isinstance(error, NotServedError):
        return grpc.StatusCode.FAILED_PRECONDITION
    return _CODES.get(error.status, grpc.StatusCode.INTERNAL)


def trailers_of(error: PoolserveError) -> tuple[tuple[str, str], ...]:
    """What an error says beside its message (retry-after of an overload), as trailing
    metadata."""
    return tuple((name.lower(), value) for name, value in (error.headers or {}).items())
