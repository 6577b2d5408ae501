"""An image input as a request names it (`ImageInput`), and its bytes (`image_bytes`): from a data
URI, a local path under the allowed folder, bytes given in Python, or a URL's body that the HTTP
edge fetched (inputs/images/fetch.py). Every refusal names the input and says what to send."""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from poolserve.errors import InvalidRequestError, PayloadTooLargeError, echoed
from poolserve.inputs.images.policy import MediaPolicy

URL_SCHEMES = ("http://", "https://")
SEND_INSTEAD = "send it as a data URI (data:image/png;base64,...)"


@dataclass(eq=False)
class ImageInput:
    """One image of a request: a reference (a data URI, a URL, a path), its bytes, or (in
    Python) a PIL image; `fetched` holds a URL's body once the HTTP edge has fetched it
    (written once, on the event loop, before the request goes to the CPU pool)."""

    source: Any
    fetched: bytes | None = None

    @property
    def url(self) -> str | None:
        """The http(s) URL it names, or None."""
        source = self.source
        if isinstance(source, str) and source[:8].lower().startswith(URL_SCHEMES):
            return source
        return None


def image_count(inputs: Sequence[object]) -> int:
    """How many of `inputs` are images. The loop asks for every request: `map` over the type's
    check runs in C, where a generator costs a Python step an input."""
    return sum(map(ImageInput.__instancecheck__, inputs))


def has_images(inputs: Sequence[object]) -> bool:
    return any(map(ImageInput.__instancecheck__, inputs))


def named_images(inputs: Sequence[object], names: str) -> list[tuple[str, ImageInput]]:
    """The images among `inputs`, each with the name errors give it (`names` formats its
    index: "input {}"); without a Python step an input where there are none."""
    if not has_images(inputs):
        return []
    return [
        (names.format(index), each)
        for index, each in enumerate(inputs)
        if isinstance(each, ImageInput)
    ]


def image_bytes(image: ImageInput, where: str, policy: MediaPolicy, param: str) -> bytes | Any:
    """The image's bytes (or, given one in Python, the PIL image itself); a 400 or 413 that
    names `where` for what cannot be read or is too large."""
    if image.fetched is not None:
        return image.fetched
    source = image.source
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        _check_size(len(data), where, policy, param)
        return data
    if not isinstance(source, str | os.PathLike):
        if hasattr(source, "getbands"):  # a PIL image
            return source
        raise InvalidRequestError(
            f"{where} is a {type(source).__name__}; an image is a data URI, a path, bytes or a "
            "PIL image",
            param=param,
        )
    text = os.fspath(source)
    if text.startswith("data:"):
        return _data_uri(text, where, policy, param)
    if image.url is not None:
        raise InvalidRequestError(
            f"{where} is a URL ({echoed(text)}); this server fetches URLs only from the hosts "
            f"--allowed-media-domains names; {SEND_INSTEAD}",
            param=param,
        )
    scheme = _scheme(text, where, param)
    if scheme and scheme != "file":
        raise InvalidRequestError(
            f"{where} is a {scheme}:// URL ({echoed(text)}); image URLs are fetched over http "
            f"and https only (from the hosts --allowed-media-domains names); {SEND_INSTEAD}",
            param=param,
        )
    if scheme == "file":
        text = unquote(urlsplit(text).path)
    return _local_file(Path(text), where, policy, param)


def _scheme(text: str, where: str, param: str) -> str:
    """The URL scheme `text` starts with, lower-cased ("" for a path); a 400 for what is not a
    URL though it looks like one (an unclosed `[` host, say)."""
    if "://" not in text[:32]:
        return ""
    try:
        return urlsplit(text).scheme.lower()
    except ValueError as exc:
        raise InvalidRequestError(
            f"{where} ({echoed(text)}) is not a valid URL ({exc}); {SEND_INSTEAD}", param=param
        ) from None


def _check_size(size: int, where: str, policy: MediaPolicy, param: str) -> None:
    if size > policy.max_image_bytes:
        raise PayloadTooLargeError(
            f"{where} has {size} bytes, more than the {policy.max_image_bytes} one image may "
            "have here (--max-image-bytes); send a smaller image",
            param=param,
        )


def _data_uri(text: str, where: str, policy: MediaPolicy, param: str) -> bytes:
    header, comma, payload = text.partition(",")
    media_type, *options = header[len("data:") :].split(";")
    if not comma or "base64" not in options:
        raise InvalidRequestError(
            f"{where} is a data URI without base64 data; send data:image/png;base64,<the "
            "file's bytes in base64>",
            param=param,
        )
    media_type = media_type.strip().lower()
    if media_type and not media_type.startswith("image/"):
        raise InvalidRequestError(
            f"{where} is a data URI of {media_type}, not an image", param=param
        )
    if media_type == "image/svg+xml":
        raise InvalidRequestError(
            f"{where} is an SVG image, which is not decoded here (a drawing, not pixels); send "
            "it rendered as PNG or JPEG",
            param=param,
        )
    # Refused by its encoded length before any of it is decoded.
    _check_size(len(payload) * 3 // 4, where, policy, param)
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError(
            f"{where}: its data URI's data is not valid base64", param=param
        ) from None


def _local_file(path: Path, where: str, policy: MediaPolicy, param: str) -> bytes:
    if not policy.trusted:
        root = policy.local_root
        if root is None:
            raise InvalidRequestError(
                f"{where} is a local path ({echoed(str(path))}); this server reads no local "
                f"files (start it with --allowed-local-media-path to allow a folder); "
                f"{SEND_INSTEAD}",
                param=param,
            )
        resolved = Path(os.path.realpath(root / path))
        if not resolved.is_relative_to(Path(os.path.realpath(root))):
            raise InvalidRequestError(
                f"{where} ({echoed(str(path))}) is outside the folder this server reads images "
                f"from (--allowed-local-media-path {root})",
                param=param,
            )
        path = resolved
    try:
        size = path.stat().st_size
        _check_size(size, where, policy, param)
        return path.read_bytes()
    except OSError as exc:
        raise InvalidRequestError(
            f"{where}: cannot read {echoed(str(path))}: {exc.strerror or exc}", param=param
        ) from None
