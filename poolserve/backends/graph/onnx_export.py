"""The main head's forward exported to ONNX, once, into the cache
(`POOLSERVE_CACHE_DIR/onnx/<key>/`).

The graph is the loaded model's own forward (backends/torch_model/export_forward.py: the backbone
and the head, pooling, Dense, SPLADE or classifier, in one graph), traced by `torch.export` and
translated by torch's ONNX exporter: no hand-written graph, and the heads are the same code the
torch runtime runs. The batch and length are dynamic; a packed forward takes the segment mask and
positions as inputs. An entry's key hashes what the graph depends on (forward_cache.key_parts, plus
the exporter's and ONNX Runtime's versions); an entry is written to a staging directory and renamed
into place, and its manifest records each file's size and digest, so a truncated or replaced file
is rebuilt, never run. Checking and building an entry hold its lock.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import logging
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from poolserve.backends.progress import progress
from poolserve.backends.torch_model.executor import TorchBatch
from poolserve.backends.torch_model.export_forward import forward_to_export
from poolserve.backends.torch_model.forward_cache import (
    MANIFEST,
    CacheEntry,
    ForwardTarget,
    entry_for,
    locked,
    sha256,
)
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)

# Bumped when what an entry holds, or how it is built, changes.
FORMAT = 1
MODEL_FILE = "model.onnx"
# Loggers of the exporter's libraries that log its passes at INFO.
_CHATTY = ("onnx_ir", "onnxscript", "torch.onnx")
# A graph's inputs by name, as a runtime takes them.
Feeds = Mapping[str, np.ndarray]
# Graphs above this size keep their weights in a file beside the graph (protobuf's 2 GiB limit).
EXTERNAL_DATA_BYTES = 1 << 30


def input_names(target: ForwardTarget) -> tuple[str, ...]:
    """The graph's inputs, in forward_to_export's order."""
    names = (
        ("input_ids", "positions", "segments", "pool_weights", "first", "last")
        if target.packed
        else ("input_ids", "attention_mask", "pool_mask")
    )
    return names + (("token_type_ids",) if target.with_token_types else ())


def graph_inputs(batch: TorchBatch, target: ForwardTarget) -> tuple[np.ndarray, ...]:
    """The batch's arrays in the graph's input order (`input_names`); a padded batch without a
    pooling mask pools what it attends to, one without token type ids has zeros."""
    ids = batch.input_ids.numpy()
    if batch.packed is not None:
        arrays: tuple[np.ndarray, ...] = (ids, *(each.numpy() for each in batch.packed))
    else:
        mask = batch.attention_mask.numpy()
        arrays = (ids, mask, mask if batch.pool_mask is None else batch.pool_mask.numpy())
    if target.with_token_types:
        types = batch.token_type_ids
        arrays += (np.zeros_like(ids) if types is None else types.numpy(),)
    return arrays


def entry_of(
    root: Path, spec: ModelSpec, target: ForwardTarget, **extra: Any
) -> tuple[CacheEntry, dict[str, Any]]:
    """The cache entry of `target`'s graph (`extra`: how it was transformed, such as quantized)."""
    # The versions as installed, read without importing the packages (onnx alone took 0.9 s of
    # a 5 s restart, which never exports).
    versions = {
        "onnx_format": FORMAT,
        "onnx": importlib.metadata.version("onnx"),
        "onnxruntime": importlib.metadata.version("onnxruntime"),
    }
    return entry_for(root, spec, target, family="onnx", extra={**versions, **extra})


def valid_model(entry: CacheEntry, model_file: str = MODEL_FILE) -> Path | None:
    """The entry's graph (`model_file`) if every file is the one its manifest recorded, else
    None."""
    try:
        manifest = json.loads(entry.manifest.read_text(encoding="utf-8"))
        if manifest.get("key") != entry.key:
            return None
        for name, (size, digest) in manifest["files"].items():
            path = entry.directory / name
            if path.parent != entry.directory or path.stat().st_size != size:
                return None
            if sha256(path) != digest:
                return None
        return entry.directory / model_file
    except (OSError, ValueError, KeyError, TypeError):
        return None


def manifest_of(entry: CacheEntry) -> dict[str, Any]:
    """What the entry's builder recorded beside its files (a quantized graph's settings)."""
    manifest: dict[str, Any] = json.loads(entry.manifest.read_text(encoding="utf-8"))
    return manifest


def cached_or_built(
    entry: CacheEntry,
    parts: dict[str, Any],
    build: Callable[[Path], dict[str, Any]],
    model_file: str = MODEL_FILE,
) -> Path:
    """The entry's graph, built first where it is missing or invalid: `build(directory)` writes
    `model_file` (and any data file) into a staging directory and returns what the manifest
    should also record."""
    with locked(entry):
        model = valid_model(entry, model_file)
        if model is not None:
            return model
        for abandoned in entry.directory.parent.glob(f".{entry.key}.*"):  # builds killed midway
            shutil.rmtree(abandoned, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{entry.key}.", dir=entry.directory.parent))
        staging.chmod(0o755)  # served by other users than the one that built it
        try:
            recorded = build(staging)
            files = {
                path.name: (path.stat().st_size, sha256(path)) for path in sorted(staging.iterdir())
            }
            manifest = {"key": entry.key, "parts": parts, "files": files, **recorded}
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
            if entry.directory.exists():  # stale or corrupt (checked under the lock)
                shutil.rmtree(entry.directory)
            staging.rename(entry.directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    model = valid_model(entry, model_file)
    if model is None:
        raise RuntimeError(f"the cache entry {entry.directory} did not verify")
    return model


def exported(root: Path, module: torch.nn.Module, spec: ModelSpec, target: ForwardTarget) -> Path:
    """The float32 graph of `target` from the cache, exported first where it is missing."""
    entry, parts = entry_of(root, spec, target)

    def build(directory: Path) -> dict[str, Any]:
        layout = "packed" if target.packed else "padded"
        with progress(logger, f"{spec.name}: exporting the {target.head} head to ONNX ({layout})"):
            export(module, spec, target, directory / MODEL_FILE)
        return {"model": spec.name}

    return cached_or_built(entry, parts, build)


def export(module: torch.nn.Module, spec: ModelSpec, target: ForwardTarget, path: Path) -> None:
    """Export `target`'s forward of the float32 `module` to `path`."""
    forward, args, dims = forward_to_export(module, spec, target)
    large = sum(p.numel() * 4 for p in module.parameters()) > EXTERNAL_DATA_BYTES
    # The exporter prints its steps, logs each initializer it folds and warns about renamed
    # axes: none of it is for our users.
    quiet = contextlib.redirect_stdout(io.StringIO())
    with warnings.catch_warnings(), quiet, quiet_loggers(_CHATTY):
        warnings.simplefilter("ignore")
        with torch.inference_mode(False), torch.no_grad():
            torch.onnx.export(
                forward,
                args,
                str(path),
                input_names=list(input_names(target)),
                output_names=["output"],
                dynamic_shapes=dims,
                dynamo=True,
                external_data=large,
            )


@contextlib.contextmanager
def quiet_loggers(names: tuple[str, ...]) -> Iterator[None]:
    """The named loggers at ERROR while the block runs."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [each.level for each in loggers]
    for each in loggers:
        each.setLevel(max(each.getEffectiveLevel(), logging.ERROR))
    try:
        yield
    finally:
        for each, level in zip(loggers, levels, strict=True):
            each.setLevel(level)
