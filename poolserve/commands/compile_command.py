"""`poolserve compile`: fill the compiled-forward cache before serving (say, in a container image).

Each model is loaded and its main head compiled ahead of time for the thread counts `serve` would
run it at with the same flags on this machine (backends/torch/aot.py keys the cache by them, and by
the CPU's instruction set: run it where the server will run, or on the same kind of CPU), and its
gain over eager measured there (backends/torch/compile_gain.py: `serve` then skips what does not
pay). A model already in the cache is only checked. With `--backend auto` (the default) it
also measures every engine and precision, torch compiled among them, and keeps the choice that
`serve` then reads (backends/choice/).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from poolserve._environment import cache_dir
from poolserve.backends import backend_for
from poolserve.config import ServedModel
from poolserve.config.grammar import model_engine_configs
from poolserve.engine.model_backend import CompileReport
from poolserve.engine.model_inputs import collate_for
from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.describe import prepare_model
from poolserve.models.resolve import fetch_weights

logger = logging.getLogger(__name__)


def compile_models(served: Sequence[ServedModel]) -> int:
    """Compile each model into the cache; 0 when every one is there, else 1 (one line each)."""
    failed = 0
    for each in served:
        try:
            name, report = _compile_one(each)
        except Exception as exc:  # one line per model, whatever went wrong
            message = exc.cli_message if isinstance(exc, SettingError) else str(exc) or repr(exc)
            logger.error("%s: %s", each.model.model or "the bundled default model", message)
            failed += 1
            continue
        if report.source == "table":
            logger.info("%s: a static model (a table looked up in numpy): nothing to compile", name)
        elif report.source in ("onnxruntime", "openvino"):
            logger.info("%s: exported to ONNX (and quantized) in %s", name, cache_dir() / "onnx")
        elif report.source in ("built", "cached"):
            logger.info(
                "%s: %s (%.1f s), in %s",
                name,
                "compiled" if report.source == "built" else "already in the cache",
                report.seconds,
                cache_dir() / "aot",
            )
        elif report.gains:  # compiled and measured, and slower than eager everywhere
            logger.info(
                "%s: compiled, but no faster than eager on this CPU (%s); `serve` runs it "
                "eagerly, and the cache holds that figure (--compile on serves it compiled)",
                name,
                ", ".join(f"{t} thread(s): {g:.2f}x" for t, g in sorted(report.gains.items())),
            )
        else:
            logger.error(
                "%s: not compiled ahead of time (%s); `serve` %s",
                name,
                report.source,
                "serves it eagerly (with --compile on, compiled with torch.compile at every start)"
                if report.source == "jit"
                else "serves it eagerly",
            )
            failed += 1
    return 1 if failed else 0


def _compile_one(served: ServedModel) -> tuple[str, CompileReport]:
    """Load the backend `serve` builds with these settings, without its runners (a compiling
    backend compiles, or finds its compiled forward in the cache, as it loads)."""
    engine = served.engine
    if engine.compile in ("off", "cached"):
        raise SettingError(
            f"--compile {engine.compile} compiles nothing: leave it out (auto) or pass --compile on"
        )
    spec = prepare_model(served.model, engine.max_batch_tokens, weights=False)
    backend = backend_for(engine, spec)(spec, engine, collate_for(spec))  # refuses what cannot work
    if spec.layout.static is not None:
        return spec.name, backend.report  # a table: nothing to compile
    from poolserve.backends.choice.auto_backend import AutoBackend  # loads torch
    from poolserve.backends.torch.torch_backend import TorchBackend

    if isinstance(backend, AutoBackend | TorchBackend):
        # Built where the cache lacks it, and (auto) measured anew, torch compiled in each
        # precision, with no time bound: `serve` reads it.
        backend.ahead_of_time = True
    fetch_weights(served.model.model, served.model.revision, spec.layout.directory)
    backend.load()
    report = backend.report
    backend.close()
    return spec.name, report


def compile_command(args: argparse.Namespace) -> int:
    """`poolserve compile`: exit 0 when every model is in the compiled cache, else 1."""
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from poolserve.commands.serve_command import served_models

    model_config, engine_config = model_engine_configs(args)
    try:
        served = served_models(args, model_config, engine_config)
    except (ModelLoadError, ValueError) as exc:
        logger.error(
            "cannot compile: %s", exc.cli_message if isinstance(exc, SettingError) else exc
        )
        return 1
    return compile_models(served)
