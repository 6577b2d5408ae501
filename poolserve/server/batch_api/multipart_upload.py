"""Reading `POST /v1/files`: a multipart/form-data body (what the openai SDK's `files.create`
sends) streamed into an `Upload` as it arrives, so a file past a bound is refused at the chunk
that passes it, before it fills the disk or memory.

The body is gathered on the event loop a megabyte at a time and parsed (python-multipart's push
parser) and written in a thread. Fields: `file` (with its filename), `purpose`, and OpenAI's
optional `expires_after[anchor]` / `expires_after[seconds]`; any other field is an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from poolserve.errors import InvalidRequestError, UnsupportedMediaTypeError
from poolserve.server.batch_api.stored_files import Upload

TEXT_FIELDS = ("purpose", "expires_after[anchor]", "expires_after[seconds]")
# A text field's value is short; more is not one of these.
MAX_FIELD_BYTES = 1024
FEED_BYTES = 1 << 20


@dataclass
class _Form:
    """What the parser has found so far."""

    upload: Upload
    fields: dict[str, str] = field(default_factory=dict)
    filename: str | None = None
    _headers: dict[bytes, bytes] = field(default_factory=dict)
    _header: bytes = b""
    _value: bytes = b""
    _name: str | None = None
    _text: bytearray = field(default_factory=bytearray)

    def callbacks(self) -> dict[str, Callable[..., None]]:
        return {
            "on_part_begin": self._begin,
            "on_header_field": self._header_field,
            "on_header_value": self._header_value,
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._data,
            "on_part_end": self._end,
        }

    def _begin(self) -> None:
        self._headers, self._header, self._value, self._name = {}, b"", b"", None
        self._text = bytearray()

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _header_end(self) -> None:
        self._headers[self._header.lower()] = self._value
        self._header, self._value = b"", b""

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if name == "file":
            if self.filename is not None:
                raise InvalidRequestError("send one file a request", param="file")
            self.filename = options.get(b"filename", b"upload.jsonl").decode("utf-8", "replace")[
                :255
            ]
        elif name not in TEXT_FIELDS:
            raise InvalidRequestError(
                f"unknown form field {name[:64]!r}; send `file` and `purpose` (and optionally "
                "expires_after[anchor] and expires_after[seconds])",
                param=name[:64],
            )
        self._name = name

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self._name == "file":
            self.upload.write(data[start:end])
            return
        self._text += data[start:end]
        if len(self._text) > MAX_FIELD_BYTES:
            raise InvalidRequestError(f"the form field {self._name} is too long", param=self._name)

    def _end(self) -> None:
        if self._name is not None and self._name != "file":
            self.fields[self._name] = self._text.decode("utf-8", "replace")


def _boundary(request: Request) -> bytes:
    kind, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise UnsupportedMediaTypeError(
            "upload the file as multipart/form-data, with the fields `file` and `purpose` "
            "(what the openai SDK's files.create sends)"
        )
    return boundary


async def read_upload(request: Request, upload: Upload) -> tuple[str, dict[str, str]]:
    """Stream `request`'s form into `upload`: the file's name and the text fields. Raises the
    bound's error (the caller discards the upload)."""
    form = _Form(upload)
    parser = MultipartParser(_boundary(request), form.callbacks())  # type: ignore[arg-type]
    gathered: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            gathered.append(chunk)
            size += len(chunk)
            if size >= FEED_BYTES:
                await asyncio.to_thread(parser.write, b"".join(gathered))
                gathered, size = [], 0
        await asyncio.to_thread(_last, parser, b"".join(gathered))
    except FormParserError as exc:
        raise InvalidRequestError(
            f"the multipart/form-data body cannot be read ({exc}); send the file as the openai "
            "SDK's files.create does"
        ) from None
    if form.filename is None:
        raise InvalidRequestError("the form has no `file` field; send the file in it", param="file")
    return form.filename, form.fields


def _last(parser: MultipartParser, data: bytes) -> None:
    parser.write(data)
    parser.finalize()
