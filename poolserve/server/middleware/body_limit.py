"""Refusing oversized bodies with a JSON 413 before they are read into memory.

A declared `Content-Length` over the limit is refused at once; a chunked body is counted as it
streams in and refused as soon as it passes the limit. Paths under a prefix of `larger` have its
limit instead, named by its flag (the Batch API's uploads; their route bounds the file itself).
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.server.error_responses import error_response


class BodyTooLargeError(Exception):
    pass


def body_too_large(max_bytes: int, flag: str = "") -> Response:
    """The 413 of a body over `max_bytes` (`flag`: the route's own limit's flag, if it has one)."""
    if flag:
        message = (
            f"the request body is larger than this route accepts ({max_bytes:,} bytes, "
            f"{flag}); split it"
        )
    else:
        message = (
            f"the request body is larger than this server accepts ({max_bytes} bytes); "
            "split the request, or start the server with a larger --max-request-bytes"
        )
    return error_response(413, message)


def counted(receive: Receive, max_bytes: int) -> Receive:
    """`receive`, raising BodyTooLargeError once the body has passed `max_bytes`."""
    received = 0

    async def counting_receive() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > max_bytes:
                raise BodyTooLargeError
        return message

    return counting_receive


class BodyLimitMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        larger: tuple[tuple[str, int, str], ...] = (),
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.larger = larger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes, flag = self.max_bytes, ""
        for prefix, limit, its_flag in self.larger:
            if scope["path"].startswith(prefix):
                max_bytes, flag = limit, its_flag
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > max_bytes:
                await body_too_large(max_bytes, flag)(scope, receive, send)
                return
        try:
            await self.app(scope, counted(receive, max_bytes), send)
        except BodyTooLargeError:
            await body_too_large(max_bytes, flag)(scope, receive, send)
