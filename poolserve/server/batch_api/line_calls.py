"""One line of a batch, answered exactly as its route answers the same body sent alone: the
line's body goes, as an in-process HTTP request, through the server's own layers from the body
limit inward (admission in its lane, the route, its errors), and its status and body come back.

Only the layers a batch has already passed stay out: metrics of HTTP requests, tracing, CORS and
the API key (the batch's creator was let in). The request is in the lowest lane (`x-priority`),
unless the line's body names its own `priority`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import orjson
from starlette.types import ASGIApp, Message, Scope

from poolserve.config.priorities import LOWEST_PRIORITY
from poolserve.server.scope_keys import REQUEST_ID_KEY

logger = logging.getLogger("poolserve")

BACKGROUND = str(LOWEST_PRIORITY).encode()
UNEXPECTED = orjson.dumps(
    {
        "error": {
            "message": "the server failed unexpectedly; its log says why",
            "type": "internal_server_error",
            "param": None,
            "code": 500,
        }
    }
)


@dataclass(frozen=True)
class LineAnswer:
    status: int
    body: bytes


class LineCaller:
    """Calls the server's inner layers (`app`, from server/edge.py) with one body at a time;
    `app_root` is the application whose state the routes read."""

    def __init__(self, inner: ASGIApp, app_root: object) -> None:
        self._inner = inner
        self._root = app_root

    async def call(
        self, path: str, body: bytes, request_id: str, *, own_priority: bool, gone: asyncio.Event
    ) -> LineAnswer:
        """Answer `body` at `path`; `gone` set: the caller has left (the request's work is
        cancelled, as when an HTTP client goes)."""
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if not own_priority:
            headers.append((b"x-priority", BACKGROUND))
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": headers,
            "client": None,
            "server": None,
            "state": {},
            "app": self._root,
            REQUEST_ID_KEY: request_id,
        }
        sent = False
        status = 500
        parts: list[bytes] = []

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))

        try:
            await self._inner(scope, receive, send)
        except Exception:
            # What the server's outer layer answers 500 (server/error_responses.py).
            logger.exception("a batch line to %s failed unexpectedly", path)
            return LineAnswer(500, UNEXPECTED)
        return LineAnswer(status, b"".join(parts))
