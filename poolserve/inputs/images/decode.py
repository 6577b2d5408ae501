"""Bytes to pixels, safely: only raster formats, the size read from the header and refused
before anything is decoded (a 1 KB PNG may claim 50,000 × 50,000 pixels: 7.5 GB decoded), one
frame only, and every failure a 400 (a 413 for too many pixels) that names the input.

Pillow's own bomb guard (`Image.MAX_IMAGE_PIXELS`) is a process-wide setting; the limit here is
the server's (`--max-image-pixels`), checked on the header's size before `load()`.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from typing import Any

from PIL import Image, UnidentifiedImageError

from poolserve.errors import InvalidRequestError, PayloadTooLargeError
from poolserve.inputs.images.policy import MediaPolicy

# Raster formats of photos and page images; SVG (a program), PDF, PSD and the rest are refused.
FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF")


def decode_image(
    data: bytes | Any,
    where: str,
    policy: MediaPolicy,
    param: str,
    check_shape: Callable[[tuple[int, int]], None] = lambda size: None,
) -> Any:
    """An RGB PIL image of `data` (an image file's bytes, or a PIL image given in Python).
    `check_shape` (the processor's own limits: raises to refuse) is told the size the header
    gives, before anything is decoded."""
    if not isinstance(data, bytes):
        _check_pixels(data.size, where, policy, param)
        check_shape(data.size)
        return data.convert("RGB") if data.mode != "RGB" else data
    try:
        with warnings.catch_warnings():
            # Pillow warns past its own limit; the server's limit decides below.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=FORMATS)
    except Image.DecompressionBombError:
        raise _too_many_pixels(where, None, policy, param) from None
    except UnidentifiedImageError:
        raise InvalidRequestError(
            f"{where} is not an image in a format read here ({', '.join(FORMATS)})"
            + (" (it looks like SVG: send it rendered as PNG)" if _looks_like_svg(data) else ""),
            param=param,
        ) from None
    except OSError as exc:
        raise _unreadable(where, exc, param) from None
    with image:
        _check_pixels(image.size, where, policy, param)
        check_shape(image.size)
        frames = int(getattr(image, "n_frames", 1))
        if frames > 1:
            raise InvalidRequestError(
                f"{where} is an animated image ({frames} frames, {image.format}); send "
                "one frame as a still image",
                param=param,
            )
        try:
            image.load()
            return image.convert("RGB") if image.mode != "RGB" else image.copy()
        except (OSError, ValueError, SyntaxError) as exc:
            raise _unreadable(where, exc, param) from None


def _check_pixels(size: tuple[int, int], where: str, policy: MediaPolicy, param: str) -> None:
    width, height = size
    if width * height > policy.max_image_pixels:
        raise _too_many_pixels(where, size, policy, param)
    if width < 1 or height < 1:
        raise InvalidRequestError(f"{where} has no pixels ({width} × {height})", param=param)


def _too_many_pixels(
    where: str, size: tuple[int, int] | None, policy: MediaPolicy, param: str
) -> PayloadTooLargeError:
    shape = f" ({size[0]} × {size[1]})" if size is not None else ""
    return PayloadTooLargeError(
        f"{where} decodes to more pixels{shape} than the {policy.max_image_pixels} one image "
        "may have here (--max-image-pixels); send it scaled down",
        param=param,
    )


def _unreadable(where: str, exc: BaseException, param: str) -> InvalidRequestError:
    reason = str(exc).strip() or type(exc).__name__
    return InvalidRequestError(
        f"{where} cannot be decoded ({reason}): the file is damaged or cut short; send the "
        "whole file",
        param=param,
    )


def _looks_like_svg(data: bytes) -> bool:
    head = data[:512].lstrip().lower()
    return head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in head)
