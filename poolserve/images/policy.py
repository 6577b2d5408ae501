"""What images a request may carry and where they may come from (`MediaPolicy`), safe by
default: data URIs and uploaded bytes only, each image bounded in bytes and in pixels, a request
bounded in images. Fetching http(s) URLs is off unless hosts are named (`--allowed-media-domains`);
local paths are off unless a folder is named (`--allowed-local-media-path`). The Python API and
`poolserve embed` serve their own caller, who may name any local file (`trusted`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Defaults: a 20 MiB image file; 40 megapixels (a 7,000 × 5,700 photo) decoded, which holds
# 160 MB as RGBA while it is converted; 64 images in one request.
MAX_IMAGE_BYTES = 20 * 1024 * 1024
MAX_IMAGE_PIXELS = 40_000_000
MAX_IMAGES_PER_REQUEST = 64
FETCH_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class MediaPolicy:
    max_image_bytes: int = MAX_IMAGE_BYTES
    max_image_pixels: int = MAX_IMAGE_PIXELS
    max_images: int = MAX_IMAGES_PER_REQUEST
    # Hosts whose http(s) URLs are fetched (exact names, or ".example.com" for its subdomains);
    # empty: URLs are refused.
    allowed_domains: tuple[str, ...] = ()
    # The folder under which local paths (and file:// URLs) are read; None: they are refused.
    local_root: Path | None = None
    # Any local path is read (the Python API's and the bulk command's own caller).
    trusted: bool = False
    fetch_timeout: float = FETCH_TIMEOUT_SECONDS

    @classmethod
    def for_caller(cls) -> MediaPolicy:
        """The policy of a caller in this process (Python, `poolserve embed`): any local file,
        the same byte and pixel limits."""
        return cls(trusted=True, max_images=2**31 - 1)

    def allows_host(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        for allowed in self.allowed_domains:
            allowed = allowed.lower().rstrip(".")
            if host == allowed.lstrip(".") or (allowed.startswith(".") and host.endswith(allowed)):
                return True
        return False
