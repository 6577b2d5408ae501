"""Configuration: one set of frozen dataclasses shared by the CLI, environment variables and Python.

`ModelConfig` says what to load and how, `EngineConfig` how to batch and schedule, `ServedModel`
puts the two together with a model's names (a server may serve several), `ServerConfig` how to
serve over HTTP. The CLI builds these from flags (each flag also read from a
`POOLSERVE_*` environment variable); the Python API takes them directly.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from poolserve.backends import BACKENDS
from poolserve.errors import SettingError
from poolserve.images.policy import (
    FETCH_TIMEOUT_SECONDS,
    MAX_IMAGE_BYTES,
    MAX_IMAGE_PIXELS,
    MAX_IMAGES_PER_REQUEST,
    MediaPolicy,
)
from poolserve.memory_bound import default_queued_tokens, machine_memory
from poolserve.settings import check_settings, setting

# What the shortest input costs in admission (it still holds an output row); see
# server/admission.py.
MIN_INPUT_TOKENS = 4

DType = Literal["auto", "float32", "bfloat16", "float16"]
DTYPES: tuple[DType, ...] = ("auto", "float32", "bfloat16", "float16")
Device = Literal["auto", "cpu", "cuda"]
DEVICES: tuple[Device, ...] = ("auto", "cpu", "cuda")
# auto: compile ahead of time where it can work (or load it from the cache); cached: load it
# from the cache where it is there, else run eagerly (what `poolserve embed`'s auto means: a
# job pays for no compile); on: compile or refuse to start.
CompileMode = Literal["off", "on", "auto", "cached"]
COMPILE_MODES: tuple[CompileMode, ...] = ("off", "on", "auto", "cached")
PackingMode = Literal["auto", "off"]
PACKING_MODES: tuple[PackingMode, ...] = ("auto", "off")
# Attention implementation: auto lets transformers pick (sdpa where the architecture has it).
Attention = Literal["auto", "sdpa", "eager"]
ATTENTIONS: tuple[Attention, ...] = ("auto", "sdpa", "eager")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
# What an input longer than the model's length gets when its request does not say
# (tasks/chunking.py): refused, cut, or embedded in chunks.
LongInput = Literal["truncate", "chunk", "error"]
LONG_INPUTS: tuple[LongInput, ...] = ("truncate", "chunk", "error")


@dataclass(frozen=True)
class ModelConfig:
    """What model to load and how. Each field made by `setting` is also a flag (see
    poolserve/settings.py)."""

    # A local directory or a Hugging Face hub id; None means the bundled default model.
    model: str | None = None
    revision: str | None = setting(
        None, help="the model's revision (a branch, tag or commit) when it comes from the hub"
    )
    dtype: DType = setting(
        "auto",
        choices=DTYPES,
        help="auto: bf16 on CUDA or on CPUs with AMX/AVX512-BF16, else float32",
    )
    device: Device = setting("auto", choices=DEVICES, help="auto: CUDA when available, else CPU")
    # Overrides the length limit read from the model (must not exceed what the model supports).
    max_model_len: int | None = setting(
        None, minimum=1, help="lower the model's length limit (tokens)"
    )
    long_input: LongInput = setting(
        "error",
        choices=LONG_INPUTS,
        help="what an embedding input longer than the model's length gets when its request "
        "does not say (long_input, or its API's truncation field): error (a 400), truncate, or "
        "chunk (embedded in chunks, their vectors averaged by tokens)",
    )
    max_input_tokens: int = setting(
        32768,
        minimum=1,
        help="the most tokens one embedding input may have when it is chunked",
    )
    # Forces the kind of model (see models/kinds.py); None or "auto" detects it.
    task: str | None = None
    # Prompts by name, added to (or replacing) those in the model's
    # config_sentence_transformers.json.
    prompts: tuple[tuple[str, str], ...] = ()
    # Run model code shipped with the checkpoint (config.json's auto_map); off: such a model is
    # refused, or loaded with transformers' own classes where it has them.
    trust_remote_code: bool = False
    attention: Attention = setting(
        "auto",
        choices=ATTENTIONS,
        help="attention implementation: auto (sdpa where the architecture has it, else eager)",
    )
    # A JSON file saying how a causal LM scores a query-document pair (models/score_template.py);
    # None: the built-in template of the model's family.
    score_template: str | None = setting(
        None,
        metavar="FILE",
        help="a JSON file saying how a causal LM served with --task cross_encoder scores a pair "
        "(its prompt segments and yes/no tokens); default: its family's (Qwen3-Reranker, "
        "bge-reranker-v2-gemma)",
    )

    @staticmethod
    def of(model: str | None, config: ModelConfig | None) -> ModelConfig:
        """The config of a call that takes both a `model` and a `model_config` (either may be
        left out; both must not name different models)."""
        if config is None:
            return ModelConfig(model=model)
        if model is None:
            return config
        if config.model not in (None, model):
            raise ValueError(
                f"two models given: {model!r} and model_config.model {config.model!r}; pass one"
            )
        return replace(config, model=model)


@dataclass(frozen=True)
class EngineConfig:
    """How the engine tokenizes, batches and schedules work. Each field made by `setting` is
    also a flag of `serve` and `embed` (poolserve/settings.py)."""

    max_batch_tokens: int = setting(
        16384,
        minimum=1,
        help="padded tokens (batch size x longest input) one forward pass may hold",
    )
    max_batch_size: int = setting(256, minimum=1, help="inputs one forward pass may hold")
    # See engine/scheduler.py.
    bucket_padding_tokens: int | None = setting(
        32,
        minimum=0,
        off=True,
        help="cut a batch into length buckets where its next-longer input would add more than "
        "this many padding tokens in all (real text varies in length; 32 measured best on "
        "CPU; 0: each length alone; off: one batch padded to its longest)",
    )
    # See models/packing.py.
    packing: PackingMode = setting(
        "auto",
        choices=PACKING_MODES,
        help="run several inputs in one row of a batch, each attending to itself only (no "
        "padding to the longest input); auto: where the model packs correctly, which is checked "
        "at start-up (others run length buckets); off: padded batches only",
    )
    cpu_workers: int = setting(
        default_factory=lambda: os.cpu_count() or 1,
        minimum=1,
        help="threads for tokenization and response building (default: cores)",
    )
    runners: int | None = setting(
        None,
        minimum=1,
        help="model runner threads, each running its own batches over one copy of the weights "
        "(default: one per core on CPU, one on CUDA)",
    )
    torch_threads: int | None = setting(
        None,
        minimum=1,
        help="threads torch uses inside one operator, per runner (default on CPU: cores ÷ runners)",
    )
    # See engine/executor.py and engine/scheduler.py.
    single_thread_tokens: int = setting(
        256,
        minimum=0,
        help="on CPU, batches under this many padded tokens run on one torch thread, larger ones "
        "also use the cores of idle runners (0: never one thread)",
    )
    backend: str = setting(
        "torch",
        choices=tuple(BACKENDS),
        help="what runs the model (torch: PyTorch, eager or compiled; poolserve/backends.py)",
    )
    # Off in Python (compiling takes tens of seconds at start-up); the commands default to auto.
    compile: CompileMode = setting(
        "off",
        choices=COMPILE_MODES,
        cli_default="auto",
        help="compile the model's forward ahead of time (cached under POOLSERVE_CACHE_DIR, so "
        "a restart loads it in a second; `poolserve compile` fills the cache); auto: on CPU "
        "where a C++ compiler is found (`embed`: only what the cache holds, else eagerly: a "
        "job never waits for a compile); cached: only what the cache holds",
    )
    # See engine/result_cache.py.
    cache_bytes: int = setting(
        0,
        minimum=0,
        help="keep the model's outputs for inputs seen before, up to this many bytes (an LRU; "
        "a repeat is answered without the model, in the same bytes); 0: no cache",
    )
    # Inputs per CPU-pool task when a request is tokenized; large requests are split in chunks of
    # this size so that they interleave with small requests instead of blocking them.
    tokenize_chunk_size: int = 64
    # How many waiting items the scheduler looks at when it sorts by length to cut padding.
    schedule_window: int = 1024
    # The cores this engine may use, for its default runners and torch threads; None: the
    # process's CPU affinity. Set where several engines share a machine (Ray replicas).
    cores: int | None = None


@dataclass(frozen=True)
class ServedModel:
    """One model of several behind one server (or one `ModelSet`): what to load, how its engine
    batches, and the names clients may call it by (default: the model's id)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    served_names: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ServerConfig:
    """How the HTTP server listens and what it calls the model."""

    host: str = setting("127.0.0.1", help="address to listen on")
    port: int = setting(8000, minimum=1, maximum=65535, help="port to listen on")
    # The names clients may pass as `model` (responses carry the first); default: the model's id.
    served_model_name: tuple[str, ...] | None = None
    log_level: str = setting("info", choices=LOG_LEVELS, help="one of " + ", ".join(LOG_LEVELS))
    access_log: bool = False
    max_request_bytes: int = setting(
        8 * 1024 * 1024, minimum=1, help="larger request bodies are refused with 413"
    )
    # More is a 413 that names the limit.
    max_client_batch_size: int = setting(
        2048, minimum=1, help="inputs (or documents) one request may carry"
    )
    # Bearer keys any of which opens the API routes; empty: no authentication.
    api_keys: tuple[str, ...] = ()
    # Require the API key on /metrics too (it is open by default, like /health).
    protect_metrics: bool = False
    # Origins whose browser pages may call the API (CORS); empty: none, "*": any.
    allowed_origins: tuple[str, ...] = ()
    # Hosts whose http(s) image URLs are fetched (images/fetch.py); empty: URLs are refused.
    allowed_media_domains: tuple[str, ...] = ()
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
        seconds="positive",
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
        30, minimum=0, help="seconds that admitted requests get to finish after SIGTERM"
    )
    # Admission: requests in flight, and tokens waiting for the model, before new requests get
    # 429 with Retry-After.
    max_concurrent_requests: int = setting(
        1024, minimum=1, help="requests in flight before new ones get 429"
    )
    # None: sized from the machine's memory once the models are known (`sized_for`).
    max_queued_tokens: int | None = setting(
        None,
        minimum=1,
        help="what admitted requests may cost in all, in tokens, before new ones wait at the "
        "door (default: what an eighth of the machine's memory holds by the README's bound, "
        "logged at start-up)",
    )
    max_admission_wait: float = setting(
        10.0,
        seconds="non_negative",
        help="seconds a request that does not fit may wait, unread, for room before its 429 "
        "(refused at once when the measured rate says room will not come in time); 0: no wait",
    )
    # None: half of max_queued_tokens.
    max_request_tokens: int | None = setting(
        None,
        minimum=1,
        help="the most one request may cost, in tokens (at least 4 per input); more is a 413 "
        "(default: half of --max-queued-tokens, the most it may be)",
    )
    # A client may ask for a shorter one with the `x-request-timeout` header.
    request_timeout: float | None = setting(
        None,
        seconds="positive",
        help="seconds from admission before a request is answered 504 and its work cancelled "
        "(default: none)",
    )

    @property
    def media(self) -> MediaPolicy:
        """What image inputs may be and come from over HTTP."""
        root = self.allowed_local_media_path
        return MediaPolicy(
            max_image_bytes=self.max_image_bytes,
            max_image_pixels=self.max_image_pixels,
            max_images=self.max_images_per_request,
            allowed_domains=self.allowed_media_domains,
            local_root=None if root is None else Path(root).expanduser().resolve(),
            fetch_timeout=self.media_fetch_timeout,
        )

    @property
    def request_tokens(self) -> int:
        """The most one request may cost, in tokens (once `max_queued_tokens` is known)."""
        if self.max_request_tokens:
            return self.max_request_tokens
        return self.queued_tokens // 2

    @property
    def queued_tokens(self) -> int:
        """What admitted requests may cost in all (once sized: `sized_for`)."""
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
        return 2 * request

    def sized_for(
        self,
        outputs: Sequence[tuple[int, bool]],
        max_model_len: int,
        *,
        memory_share: float = 1.0,
    ) -> ServerConfig:
        """This config with `max_queued_tokens` sized from the machine's memory (this server's
        `memory_share` of it, where several share the machine) for models of these `outputs`
        (see `memory_bound`) where none was given."""
        if self.max_queued_tokens is not None:
            return self
        tokens = default_queued_tokens(
            outputs,
            max_requests=self.max_concurrent_requests,
            least=self.least_queued_tokens(max_model_len),
            memory=int(machine_memory() * memory_share),
        )
        return replace(self, max_queued_tokens=tokens)

    def check_limits(self, max_model_len: int | None = None) -> None:
        """Raise ValueError (one line) unless the request limits fit together (README, "Limits
        that fit together"): one request of the largest size leaves room for others, one input
        of the model's full length fits a request, and so does a request of
        `max_client_batch_size` of the shortest inputs."""
        check_settings(self)  # what each flag would refuse, given in Python
        root = self.allowed_local_media_path
        if root is not None and not Path(root).expanduser().is_dir():
            raise SettingError(f"--allowed-local-media-path {root} is not a folder")
        if self.max_queued_tokens is None and self.max_request_tokens is None:
            return  # both sized from memory later, to fit
        request, queued = self.request_tokens, self.max_queued_tokens
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
