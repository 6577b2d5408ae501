"""A refused body is freed by reference counting: no error is kept where its traceback would tie
it (and the body) into a cycle that waits for the garbage collector (every so many allocations,
while bodies of megabytes would wait)."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from pydantic import BaseModel
from starlette.requests import Request

from poolserve.errors import InvalidRequestError
from poolserve.server.body import parse_chosen_body, validate_body

pytestmark = pytest.mark.anyio


class Texts(BaseModel):
    input: list[str]


def request_of(body: bytes) -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        assert not sent, "the body is read once"
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    headers = [(b"content-type", b"application/json")]
    return Request({"type": "http", "method": "POST", "headers": headers}, receive)


REFUSED = (
    b'{"input": [1, {"a": 2}]}',  # fields of the wrong type
    b"[1, 2, 3]",  # JSON, not an object
    b'{"input": ["a"',  # not JSON
)


@pytest.mark.parametrize("body", REFUSED)
async def test_a_refused_body_leaves_no_cycle(body: bytes) -> None:
    gc.collect()
    gc.disable()
    refused = 0
    try:
        try:  # (no `as`: the test's own frame must not hold the error either)
            await parse_chosen_body(request_of(body), lambda data: Texts, cpu=None)  # type: ignore[arg-type]
        except InvalidRequestError:
            refused += 1
        try:
            validate_body(Texts, body)
        except InvalidRequestError:
            refused += 1
        assert refused == 2
        assert gc.collect() == 0
    finally:
        gc.enable()
