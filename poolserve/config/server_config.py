"""How the HTTP server listens and what it admits: `ServerConfig`. Each field made by `setting` is
also a flag of `serve` (config/fields.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from poolserve.config.fields import check_settings, setting
from poolserve.errors import SettingError

# What the shortest input costs in admission (it still holds an output row); see
# admission/control.py.
MIN_INPUT_TOKENS = 4
LogLevel = Literal["critical", "error", "warning", "info", "debug"]
# Image defaults: a 20 MiB image file; 40 megapixels (a 7,000 × 5,700 photo) decoded, which
# holds 160 MB as RGBA while it is converted; 64 images in one request.
MAX_IMAGE_BYTES = 20 * 1024 * 1024
MAX_IMAGE_PIXELS = 40_000_000
MAX_IMAGES_PER_REQUEST = 64
FETCH_TIMEOUT_SECONDS = 10.0
# The Batch API's bounds: OpenAI's for one file (200 MB, 50,000 requests); 20 GB in all; files
# and finished batches kept 30 days.
MAX_BATCH_FILE_BYTES = 200_000_000
MAX_BATCH_FILE_LINES = 50_000
MAX_BATCH_DIR_BYTES = 20_000_000_000
BATCH_RETENTION_HOURS = 720.0


@dataclass(frozen=True)
class ServerConfig:
    """How the HTTP server listens and what it calls the model."""

    host: str = setting("127.0.0.1", help="address to listen on")
    port: int = setting(8000, minimum=1, maximum=65535, help="port to listen on")
    # The names clients may pass as `model` (responses carry the first); default: the model's id.
    served_model_name: tuple[str, ...] | None = setting(
        None,
        several=True,
        metavar="NAME",
        help="names clients may pass as `model` (the first is used in responses); one model "
        "only (with several, name them in --config)",
    )
    log_level: LogLevel = setting("info", help="how much to log")
    access_log: bool = setting(
        False,
        help="log one line per request (uvicorn's access log; the client's address from "
        "X-Forwarded-For where a proxy at FORWARDED_ALLOW_IPS, default 127.0.0.1, sends it)",
    )
    max_request_bytes: int = setting(
        8 * 1024 * 1024, minimum=1, help="larger request bodies are refused with 413"
    )
    # More is a 413 that names the limit.
    max_client_batch_size: int = setting(
        2048, minimum=1, help="inputs (or documents) one request may carry"
    )
    # Bearer keys any of which opens the API routes; empty: no authentication.
    api_keys: tuple[str, ...] = setting(
        (),
        name="--api-key",
        metavar="KEY",
        help="require `Authorization: Bearer KEY` on the API routes; repeat for several keys "
        "(POOLSERVE_API_KEY: comma-separated)",
    )
    # Require the API key on /metrics too (it is open by default, like /health).
    protect_metrics: bool = setting(False, help="require the API key on /metrics too")
    # Origins whose browser pages may call the API (CORS); empty: none, "*": any.
    allowed_origins: tuple[str, ...] = setting(
        (),
        metavar="ORIGIN",
        help="origins whose browser pages may call the API (CORS), e.g. https://app.example; "
        "repeat for several, * for any (POOLSERVE_ALLOWED_ORIGINS: comma-separated; "
        "default: none)",
    )
    # Hosts whose http(s) image URLs are fetched (inputs/images/fetch.py); empty: URLs are refused.
    allowed_media_domains: tuple[str, ...] = setting(
        (),
        several=True,
        metavar="HOST",
        help="fetch image URLs (http and https) from these hosts only, e.g. images.example.com "
        "or .example.com for its subdomains; private and loopback addresses only when named "
        "(POOLSERVE_ALLOWED_MEDIA_DOMAINS: comma-separated; default: no URL is fetched)",
    )
    allowed_local_media_path: str | None = setting(
        None,
        metavar="DIR",
        help="read image inputs given as local paths (or file:// URLs) under this folder "
        "(default: none are read)",
    )
    max_image_bytes: int = setting(
        MAX_IMAGE_BYTES, minimum=1, help="the most bytes one image file may have (413)"
    )
    max_image_pixels: int = setting(
        MAX_IMAGE_PIXELS,
        minimum=1,
        help="the most pixels one image may decode to, read from its header before decoding (413)",
    )
    max_images_per_request: int = setting(
        MAX_IMAGES_PER_REQUEST, minimum=1, help="images one request may carry (413)"
    )
    media_fetch_timeout: float = setting(
        FETCH_TIMEOUT_SECONDS,
        number="positive",
        help="seconds one image URL may take to fetch (--allowed-media-domains)",
    )
    gzip_min_bytes: int = setting(
        256 * 1024,
        minimum=0,
        help="gzip responses of at least this many bytes for clients that accept it "
        "(compressed in the CPU pool); 0: never",
    )
    # After SIGTERM/SIGINT, before the server exits.
    shutdown_timeout: int = setting(
        30,
        minimum=0,
        help="seconds that admitted requests get to finish after SIGTERM or SIGINT (Ctrl-C)",
    )
    # Admission: requests in flight, and tokens waiting for the model, before new requests get
    # 429 with Retry-After.
    max_concurrent_requests: int = setting(
        1024, minimum=1, help="requests in flight before new ones get 429"
    )
    # None: sized from the machine's memory once the models are known (admission/budget.py:
    # `sized_for`).
    max_queued_tokens: int | None = setting(
        None,
        minimum=1,
        help="what admitted requests may cost in all, in tokens, before new ones wait at the "
        "door (default: what an eighth of the machine's memory holds by the memory bound of the "
        "docs' Production and limits page, logged at start-up)",
    )
    max_admission_wait: float = setting(
        10.0,
        number="non_negative",
        help="seconds a request that does not fit may wait, unread, for room before its 429 "
        "(refused at once when the measured rate says room will not come in time); 0: no wait",
    )
    # See engine/lanes.py and admission/control.py.
    background_share: float = setting(
        0.75,
        number="positive",
        help="the share of --max-queued-tokens that background requests (priority above 0) may "
        "hold in all; the rest is kept for the default priority and above (at most 1)",
    )
    # None: half of max_queued_tokens.
    max_request_tokens: int | None = setting(
        None,
        minimum=1,
        help="the most one request may cost, in tokens (at least 4 per input); more is a 413 "
        "(default: half of --max-queued-tokens, the most it may be, or --background-share of it "
        "where less)",
    )
    # A client may ask for a shorter one with the `x-request-timeout` header.
    request_timeout: float | None = setting(
        None,
        number="positive",
        help="seconds from a request's arrival (a wait at the door included) before it is "
        "answered 504 and its work cancelled (default: none)",
    )

    # OpenAI's Batch API (server/batch_api/): where its files and batches are kept; None: under
    # the cache directory (POOLSERVE_CACHE_DIR).
    batch_dir: str | None = setting(
        None,
        metavar="DIR",
        help="where the Batch API (/v1/files, /v1/batches) keeps its files and batches "
        "(default: batches/ under POOLSERVE_CACHE_DIR, else ~/.cache/poolserve)",
    )
    max_batch_file_bytes: int = setting(
        MAX_BATCH_FILE_BYTES,
        minimum=1,
        help="the largest file /v1/files takes (413; OpenAI's limit by default); a file of more "
        f"than {MAX_BATCH_FILE_LINES:,} lines is refused too",
    )
    max_batch_dir_bytes: int = setting(
        MAX_BATCH_DIR_BYTES,
        minimum=1,
        help="what the files under --batch-dir may hold in all, uploads and batch outputs; an "
        "upload past it is refused with 507",
    )
    batch_retention_hours: float = setting(
        BATCH_RETENTION_HOURS,
        number="positive",
        help="hours a file, and a finished batch, is kept before it is deleted (a batch's input "
        "file from when the batch ends)",
    )

    # The gRPC front end (tei_grpc/); None: off.
    grpc_port: int | None = setting(
        None,
        minimum=1,
        maximum=65535,
        help="also serve text-embeddings-inference's gRPC protocol (tei.v1, with gRPC health "
        "and reflection) on this port, beside HTTP (default: off; needs poolserve[grpc])",
    )
    # OpenTelemetry traces (observe/tracing.py); None: off.
    otlp_endpoint: str | None = setting(
        None,
        metavar="URL",
        help="export traces of requests over OTLP/gRPC to this collector, e.g. "
        "http://127.0.0.1:4317 (default: off; needs poolserve[otel]; the OTEL_* variables "
        "configure the exporter)",
    )
    # None: 0.1, or the SDK's sampler where OTEL_TRACES_SAMPLER is set (observe/tracing.py).
    trace_sample_ratio: float | None = setting(
        None,
        number="non_negative",
        metavar="RATIO",
        help="the share of requests traced (--otlp-endpoint) among those that come without a "
        "caller's traceparent (default 0.1, or OTEL_TRACES_SAMPLER's choice where it is set; 1: "
        "every request); a request whose traceparent says sampled is always traced, one that "
        "says not sampled never",
    )
    otlp_service_name: str | None = setting(
        None,
        metavar="NAME",
        help="the service.name of the traces (default: $OTEL_SERVICE_NAME, else poolserve)",
    )

    @property
    def request_tokens(self) -> int:
        """The most one request may cost, in tokens (once `max_queued_tokens` is known)."""
        if self.max_request_tokens:
            return self.max_request_tokens
        return int(self.queued_tokens * self._request_share)

    @property
    def queued_tokens(self) -> int:
        """What admitted requests may cost in all (once sized: admission's `sized_for`)."""
        if self.max_queued_tokens is None:
            raise ValueError("max_queued_tokens is sized from the models first (sized_for)")
        return self.max_queued_tokens

    def least_queued_tokens(self, max_model_len: int = 0) -> int:
        """The smallest `max_queued_tokens` the other limits fit (see `check_limits`)."""
        request = max(
            self.max_request_tokens or 0,
            max_model_len,
            self.max_client_batch_size * MIN_INPUT_TOKENS,
        )
        return math.ceil(request / self._request_share)

    @property
    def _request_share(self) -> float:
        """The share of `max_queued_tokens` one request may cost by default: half, or less
        where background requests may hold less."""
        return min(0.5, self.background_share)

    def check_limits(self, max_model_len: int | None = None) -> None:
        """Raise ValueError (one line) unless the request limits fit together (docs/production.md,
        "Limits that fit together"): one request of the largest size leaves room for others, one
        input of the model's full length fits a request, and so does a request of
        `max_client_batch_size` of the shortest inputs."""
        check_settings(self)  # what each flag would refuse, given in Python
        root = self.allowed_local_media_path
        if root is not None and not Path(root).expanduser().is_dir():
            raise SettingError(f"--allowed-local-media-path {root} is not a folder")
        if self.otlp_endpoint is not None:
            check_otlp_endpoint(self.otlp_endpoint)
        if self.trace_sample_ratio is not None and self.trace_sample_ratio > 1:
            raise SettingError(
                f"--trace-sample-ratio {self.trace_sample_ratio:g} is more than 1: it is the "
                "share of requests traced (1: every request)"
            )
        if self.grpc_port is not None and self.grpc_port == self.port:
            raise SettingError(
                f"--grpc-port {self.grpc_port} is the HTTP --port too; give gRPC a port of its own"
            )
        if self.background_share > 1:
            raise SettingError(
                f"--background-share {self.background_share:g} is more than 1: it is the share "
                "of --max-queued-tokens that background requests may hold"
            )
        if self.max_queued_tokens is None and self.max_request_tokens is None:
            return  # both sized from memory later, to fit
        request, queued = self.request_tokens, self.max_queued_tokens
        if queued is not None and request > self.background_share * queued:
            raise SettingError(
                f"--background-share {self.background_share:g} of --max-queued-tokens {queued} "
                f"is less than --max-request-tokens {request}: a background request of the "
                "largest size could never be admitted; raise the share or lower the request limit"
            )
        if queued is not None and 2 * request > queued:
            raise SettingError(
                f"--max-request-tokens {request} is more than half of --max-queued-tokens "
                f"{queued}: one request could lock every other client out; lower it or raise "
                "--max-queued-tokens"
            )
        if self.max_client_batch_size * MIN_INPUT_TOKENS > request:
            raise SettingError(
                f"--max-client-batch-size {self.max_client_batch_size} inputs cost at least "
                f"{self.max_client_batch_size * MIN_INPUT_TOKENS} tokens ({MIN_INPUT_TOKENS} "
                f"each), more than --max-request-tokens {request}; lower it or raise the tokens"
            )
        if max_model_len is not None and max_model_len > request:
            raise SettingError(
                f"--max-request-tokens {request} is less than the model's length limit "
                f"{max_model_len}: one full-length input could never be served"
            )


def check_otlp_endpoint(endpoint: str) -> None:
    """Refuse an endpoint without a scheme: OTLP's exporter then speaks TLS, which a collector
    written `host:4317` in its own docs usually does not, and every export would fail."""
    if "://" not in endpoint:
        raise SettingError(
            f"--otlp-endpoint {endpoint!r} has no scheme; write http://{endpoint} for a "
            f"plaintext collector or https://{endpoint} for TLS"
        )
