"""Refusing oversized bodies with a JSON 413 before they are read into memory.

A declared `Content-Length` over the limit is refused at once; a chunked body is counted as it
streams in and refused as soon as it passes the limit. Paths under a prefix of `larger` have its
limit instead, named by its flag (the Batch API's uploads; their route bounds the file itself).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.server.error_responses import error_response


class BodyTooLargeError(Exception):
    pass


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

    def _message(self, max_bytes: int, flag: str) -> str:
        if flag:
            return (
                f"the request body is larger than this route accepts ({max_bytes:,} bytes, "
                f"{flag}); split it"
            )
        return (
            f"the request body is larger than this server accepts ({self.max_bytes} bytes); "
            "split the request, or start the server with a larger --max-request-bytes"
        )

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
                await error_response(413, self._message(max_bytes, flag))(scope, receive, send)
                return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    raise BodyTooLargeError
            return message

        try:
            await self.app(scope, counting_receive, send)
        except BodyTooLargeError:
            await error_response(413, self._message(max_bytes, flag))(scope, receive, send)
