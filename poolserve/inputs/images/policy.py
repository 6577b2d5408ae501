"""What images a request may carry and where they may come from (`MediaPolicy`), safe by
default: data URIs and uploaded bytes only, each image bounded in bytes and in pixels, a request
bounded in images. Fetching http(s) URLs is off unless hosts are named (`--allowed-media-domains`);
local paths are off unless a folder is named (`--allowed-local-media-path`). The Python API and
`poolserve embed` serve their own caller, who may name any local file (`trusted`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from poolserve.config.server_config import (
    FETCH_TIMEOUT_SECONDS,
    MAX_IMAGE_BYTES,
    MAX_IMAGE_PIXELS,
    MAX_IMAGES_PER_REQUEST,
    ServerConfig,
)


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
    def of_server(cls, config: ServerConfig) -> MediaPolicy:
        """What image inputs may be and come from over HTTP, as the server's flags say."""
        root = config.allowed_local_media_path
        return cls(
            max_image_bytes=config.max_image_bytes,
            max_image_pixels=config.max_image_pixels,
            max_images=config.max_images_per_request,
            allowed_domains=config.allowed_media_domains,
            local_root=None if root is None else Path(root).expanduser().resolve(),
            fetch_timeout=config.media_fetch_timeout,
        )

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
