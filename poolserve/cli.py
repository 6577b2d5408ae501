"""`poolserve serve [MODEL] ...`: every flag also read from a `POOLSERVE_*` environment variable."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from poolserve import __version__
from poolserve.config import EngineConfig, ModelConfig, ServerConfig
from poolserve.errors import ModelLoadError

if TYPE_CHECKING:
    from poolserve.engine.core import BackendFactory

logger = logging.getLogger("poolserve")


def _env(name: str, default: Any, kind: type = str) -> Any:
    """The default of flag `--name` read from POOLSERVE_NAME, converted to `kind`."""
    value = os.environ.get("POOLSERVE_" + name.upper().replace("-", "_"))
    if value is None:
        return default
    if kind is bool:
        return value.strip().lower() in ("1", "true", "yes", "on")
    if kind is tuple:
        return tuple(part for part in value.replace(",", " ").split() if part)
    try:
        return kind(value)
    except ValueError:
        variable = "POOLSERVE_" + name.upper().replace("-", "_")
        raise SystemExit(
            f"poolserve: {variable}={value!r} is not a valid {kind.__name__}"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="poolserve", description=__doc__)
    parser.add_argument("--version", action="version", version=f"poolserve {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve a model over HTTP")
    serve.add_argument(
        "model",
        nargs="?",
        default=_env("model", None),
        help="local model directory or hub id (default: the bundled all-MiniLM-L6-v2)",
    )
    defaults = ServerConfig()
    serve.add_argument("--host", default=_env("host", defaults.host))
    serve.add_argument("--port", type=int, default=_env("port", defaults.port, int))
    serve.add_argument(
        "--served-model-name",
        nargs="+",
        default=_env("served-model-name", None, tuple),
        help="names clients may pass as `model` (the first is used in responses)",
    )
    serve.add_argument("--log-level", default=_env("log-level", defaults.log_level))
    serve.add_argument(
        "--max-request-bytes",
        type=int,
        default=_env("max-request-bytes", defaults.max_request_bytes, int),
        help="larger request bodies are refused with 413",
    )
    serve.add_argument(
        "--max-client-batch-size",
        type=int,
        default=_env("max-client-batch-size", defaults.max_client_batch_size, int),
        help="inputs (or documents) one request may carry",
    )
    serve.add_argument(
        "--max-concurrent-requests",
        type=int,
        default=_env("max-concurrent-requests", defaults.max_concurrent_requests, int),
        help="requests in flight before new ones get 429",
    )
    serve.add_argument(
        "--max-queued-tokens",
        type=int,
        default=_env("max-queued-tokens", defaults.max_queued_tokens, int),
        help="tokens waiting for the model before new requests get 429",
    )
    serve.add_argument(
        "--request-timeout",
        type=float,
        default=_env("request-timeout", None, float),
        help="seconds before a request is answered 504 and its work cancelled (default: none)",
    )
    serve.add_argument(
        "--api-key",
        action="append",
        default=None,
        help="require `Authorization: Bearer KEY` on the API routes; repeat for several keys "
        "(POOLSERVE_API_KEY: comma-separated)",
    )
    serve.add_argument(
        "--shutdown-timeout",
        type=int,
        default=_env("shutdown-timeout", defaults.shutdown_timeout, int),
        help="seconds that admitted requests get to finish after SIGTERM",
    )
    serve.add_argument(
        "--protect-metrics",
        action=argparse.BooleanOptionalAction,
        default=_env("protect-metrics", False, bool),
        help="require the API key on /metrics too",
    )
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=_env("access-log", False, bool),
    )
    _add_model_flags(serve)
    _add_engine_flags(serve)
    return parser


def _add_model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--revision", default=_env("revision", None))
    parser.add_argument(
        "--dtype",
        choices=["auto", "float32", "bfloat16", "float16"],
        default=_env("dtype", "auto"),
        help="auto: bf16 on CUDA or on CPUs with AMX/AVX512-BF16, else float32",
    )
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default=_env("device", "auto"))
    parser.add_argument(
        "--task",
        default=_env("task", "auto"),
        help="what the model is: auto (detect), embed, score, classify, token_embed, sparse, "
        "token_classify",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=_env("max-model-len", None, int),
        help="lower the model's length limit (tokens)",
    )


def _add_engine_flags(parser: argparse.ArgumentParser) -> None:
    defaults = EngineConfig()
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        default=_env("max-batch-tokens", defaults.max_batch_tokens, int),
        help="padded tokens one forward pass may hold",
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=_env("max-batch-size", defaults.max_batch_size, int),
        help="inputs one forward pass may hold",
    )
    parser.add_argument(
        "--cpu-workers",
        type=int,
        default=_env("cpu-workers", defaults.cpu_workers, int),
        help="threads for tokenization and response building (default: cores)",
    )
    parser.add_argument(
        "--runners",
        type=int,
        default=_env("runners", None, int),
        help="model runner threads, each running its own batches over one copy of the weights "
        "(default: one per core on CPU, one on CUDA)",
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=_env("torch-threads", None, int),
        help="threads torch uses inside one operator, per runner (default on CPU: cores ÷ runners)",
    )
    parser.add_argument(
        "--single-thread-tokens",
        type=int,
        default=_env("single-thread-tokens", defaults.single_thread_tokens, int),
        help="on CPU, batches under this many padded tokens run on one torch thread, larger ones "
        "also use the cores of idle runners (0: never one thread)",
    )
    parser.add_argument(
        "--compile",
        choices=["off", "on", "auto"],
        default=_env("compile", "auto"),
        help="torch.compile the model's forward (kernels cached under POOLSERVE_CACHE_DIR); "
        "auto (default): on CPU where a C++ compiler is found",
    )


def configs_from_args(args: argparse.Namespace) -> tuple[ModelConfig, EngineConfig, ServerConfig]:
    model = ModelConfig(
        model=args.model,
        revision=args.revision,
        dtype=args.dtype,
        device=args.device,
        max_model_len=args.max_model_len,
        task=None if args.task == "auto" else args.task,
    )
    engine = EngineConfig(
        max_batch_tokens=args.max_batch_tokens,
        max_batch_size=args.max_batch_size,
        cpu_workers=args.cpu_workers,
        runners=args.runners,
        torch_threads=args.torch_threads,
        single_thread_tokens=args.single_thread_tokens,
        compile=args.compile,
    )
    server = ServerConfig(
        host=args.host,
        port=args.port,
        served_model_name=tuple(args.served_model_name) if args.served_model_name else None,
        log_level=args.log_level,
        access_log=args.access_log,
        max_request_bytes=args.max_request_bytes,
        max_client_batch_size=args.max_client_batch_size,
        max_concurrent_requests=args.max_concurrent_requests,
        max_queued_tokens=args.max_queued_tokens,
        request_timeout=args.request_timeout,
        protect_metrics=args.protect_metrics,
        shutdown_timeout=args.shutdown_timeout,
        api_keys=tuple(args.api_key or _env("api-key", (), tuple)),
    )
    return model, engine, server


def serve(args: argparse.Namespace, backend: BackendFactory | None = None) -> int:
    import uvicorn

    from poolserve.engine.core import torch_backend
    from poolserve.offline import Engine
    from poolserve.server import create_app
    from poolserve.server.shutdown import CLOSING_SECONDS, GracefulServer

    model_config, engine_config, server_config = configs_from_args(args)
    logging.basicConfig(
        level=server_config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        engine = Engine(
            model_config=model_config,
            engine_config=engine_config,
            backend=backend or torch_backend,
        )
    except (ModelLoadError, ValueError) as exc:
        logger.error("cannot start: %s", exc)
        return 1
    app = create_app(engine, server_config)
    logger.info("serving %s on http://%s:%d", engine.name, server_config.host, server_config.port)
    grace = app.state.serving.grace
    server = GracefulServer(
        uvicorn.Config(
            app,
            host=server_config.host,
            port=server_config.port,
            loop="uvloop",
            http="httptools",
            log_level=server_config.log_level.lower(),
            access_log=server_config.access_log,
            # The handlers answer 503 when the grace period ends; uvicorn's own cut-off (which
            # cancels them) is only the last resort.
            timeout_graceful_shutdown=server_config.shutdown_timeout + CLOSING_SECONDS,
        ),
        grace,
    )
    # On SIGTERM/SIGINT uvicorn stops accepting, lets admitted requests finish and re-raises
    # the signal when done. These handlers take that re-raised signal, so a graceful shutdown
    # exits 0 instead of dying by the signal; a signal that comes while the engine closes
    # exits at once.
    for shutdown_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(shutdown_signal, lambda signum, frame: None)
    # Everything loaded so far (torch, transformers, the model: ~400k objects) lives until exit.
    # Without this, each full collection walks it all: ~200 ms with every request stalled,
    # about once a second under load.
    gc.freeze()
    server.run()
    for shutdown_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(shutdown_signal, _exit_now)
    closed = engine.close(timeout=grace.seconds_left())
    if not closed:
        # A runner is stuck in a forward pass: its thread would keep the process alive.
        logging.shutdown()
        os._exit(1)
    return 0 if server.started else 1


def _exit_now(signum: int, frame: object) -> None:
    os.write(2, f"poolserve: {signal.Signals(signum).name} while closing: exiting now\n".encode())
    os._exit(128 + signum)


def main(argv: Sequence[str] | None = None, *, backend: BackendFactory | None = None) -> int:
    """The command line; `backend` replaces the model backend (a test harness injects faults)."""
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args, backend)
    return 2


if __name__ == "__main__":
    sys.exit(main())
