"""JSON responses, with large bodies sent a slice at a time, gzipped when the client asks.

Writing a body to the socket costs the event loop CPU in proportion to its size (the kernel
copy, and the transport's buffer). Measured with the event-loop test (tests/e2e/test_event_loop.py):
one 2,000-vector response written at once held the loop for about 6 ms of CPU. A body over
`SLICE_BYTES` is therefore sent in slices, and the response yields to the loop between them,
so no single callback writes more than one slice while other requests wait.
"""

from __future__ import annotations

import asyncio
import gzip

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

SLICE_BYTES = 256 * 1024


class SlicedResponse(Response):
    """A `Response` whose body goes out `SLICE_BYTES` at a time (Content-Length is kept)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        body = bytes(self.body)
        for start in range(0, len(body), SLICE_BYTES):
            if start:
                await asyncio.sleep(0)  # a yield to the loop between slices, not a wait
            end = start + SLICE_BYTES
            await send(
                {
                    "type": "http.response.body",
                    "body": body[start:end],
                    "more_body": end < len(body),
                }
            )


class JSONBytesResponse(Response):
    """A JSON body already encoded, with its headers (lowercase names) encoded once here:
    starlette's own `__init__` would render, check and re-encode them on every answer."""

    media_type = "application/json"

    def __init__(self, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.status_code = 200
        self.body = body
        self.background = None
        raw = [
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"application/json"),
        ]
        if headers:
            raw += [(name.encode(), value.encode("latin-1")) for name, value in headers.items()]
        self.raw_headers = raw


def json_response(body: bytes, headers: dict[str, str] | None = None) -> Response:
    if len(body) > SLICE_BYTES:
        return SlicedResponse(body, media_type="application/json", headers=headers)
    return JSONBytesResponse(body, headers)


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an `Accept-Encoding` header admits gzip (`gzip`, `gzip;q=0.5`, `*`; not q=0)."""
    for coding in (accept_encoding or "").split(","):
        name, _, parameters = coding.strip().partition(";")
        if name.strip().lower() not in ("gzip", "*"):
            continue
        weight = parameters.strip().removeprefix("q=").strip()
        try:
            return not weight or float(weight) > 0
        except ValueError:
            return False
    return False


def gzip_body(body: bytes) -> bytes:
    """Level 1: JSON floats shrink about 2.5x at a third of the default level's CPU; this runs in
    the CPU pool, next to the requests' own work."""
    return gzip.compress(body, compresslevel=1, mtime=0)
