"""Ahead-of-time compiled forwards (AOTInductor), kept in a cache on disk across restarts.

A model's main head is exported once (`torch.export`, batch size and length dynamic) and compiled
by AOTInductor into a shared library that holds the frozen weights (pre-packed for oneDNN), one
per intra-op thread count (inductor writes the count into its parallel loops). The library is
kept under `POOLSERVE_CACHE_DIR/aot/<key>/`, where the key hashes everything the code depends
on (torch_model/forward_cache.py). A restart finds the entry and loads it in a fraction of a second
instead of compiling again; an entry whose library does not match the digest its manifest recorded
(truncated, overwritten) is rebuilt, never run. Checking and building an entry hold a lock file
of its own, so processes that start together build it once.

The library is run through AOTInductor's C interface (backends/torch/aot_runtime.py), without the
GIL.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from poolserve.backends.progress import progress
from poolserve.backends.torch.aot_runtime import AotModel, AotUnavailableError
from poolserve.backends.torch_model.executor import TorchBatch
from poolserve.backends.torch_model.export_forward import forward_to_export
from poolserve.backends.torch_model.forward_cache import (
    MANIFEST,
    CacheEntry,
    ForwardTarget,
    entry_for,
    locked,
    sha256,
    valid_library,
)
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)


class NotInCacheError(RuntimeError):
    """A compiled forward was to be loaded from the cache only, and is not there."""


def build(
    entry: CacheEntry,
    parts: dict[str, Any],
    module: torch.nn.Module,
    spec: ModelSpec,
    target: ForwardTarget,
) -> None:
    """Export the head, compile it for `target.threads`, and write the entry (atomically: a
    staging directory renamed into place, so a crash leaves no half-written entry)."""
    forward, args, dims = forward_to_export(module, spec, target)
    try:
        with torch.inference_mode():
            exported = torch.export.export(forward, args, dynamic_shapes=dims)
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise AotUnavailableError(f"torch.export failed: {first_line[:300]}") from exc
    entry.directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{entry.key}.", dir=entry.directory.parent))
    # mkdtemp makes it private; an entry built by one user (an image build) is served by another.
    staging.chmod(0o755)
    try:
        with torch.no_grad():  # inductor freezes the weights only outside autograd
            package = torch._inductor.aoti_compile_and_package(
                exported,
                package_path=str(staging / "model.pt2"),
                inductor_configs={"freezing": True, "cpp.threads": target.threads},
            )
        extracted = staging / "model.so"
        _extract_library(Path(package), extracted)
        Path(package).unlink()
        # Named by its contents: the dynamic loader reuses a library already loaded from the
        # same path, so a rebuilt library must not take the name of the one it replaces.
        digest = sha256(extracted)
        library = extracted.rename(staging / f"model-{digest[:16]}.so")
        manifest = {
            "key": entry.key,
            "model": spec.name,
            "library": library.name,
            "library_bytes": library.stat().st_size,
            "library_sha256": digest,
            "parts": parts,
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        if entry.directory.exists():  # stale or corrupt (checked under the entry's lock)
            shutil.rmtree(entry.directory)
        staging.rename(entry.directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _extract_library(package: Path, destination: Path) -> None:
    """The compiled model's shared library (weights included) from AOTInductor's package."""
    with zipfile.ZipFile(package) as archive:
        names = archive.namelist()
        libraries = [name for name in names if name.endswith(".so")]
        if len(libraries) != 1:
            raise AotUnavailableError(f"expected one library in {package}, found {libraries}")
        # Operators without a C shim are called back through a proxy executor that inductor
        # describes in a JSON file beside the library; this runner has none to give it.
        extern = [
            name for name in names if name.endswith(".json") and not name.endswith("metadata.json")
        ]
        if extern:
            raise AotUnavailableError(
                "the compiled model calls operators through a proxy executor "
                f"({Path(extern[0]).name})"
            )
        with archive.open(libraries[0]) as source, destination.open("wb") as target:
            shutil.copyfileobj(source, target)


@dataclass(frozen=True)
class AotLoad:
    """The compiled forwards of one head, by thread count, and how they were obtained."""

    runs: dict[int, AotModel]
    built: int  # libraries compiled by this start
    loaded: int  # libraries found in the cache
    seconds: float


def load_or_build(
    root: Path,
    module: torch.nn.Module | None,
    spec: ModelSpec,
    targets: Iterable[ForwardTarget],
    instances: int,
) -> AotLoad:
    """Each target's library from the cache, compiled from `module` first where it is missing
    or invalid (without a module, NotInCacheError instead)."""
    started = time.perf_counter()
    runs: dict[int, AotModel] = {}
    built = loaded = 0
    try:
        for target in targets:
            entry, parts = entry_for(root, spec, target)
            with locked(entry):
                library = valid_library(entry)
                if library is not None:
                    loaded += 1
                elif module is None:
                    raise NotInCacheError(f"not in the compiled cache ({entry.directory})")
                else:
                    library = _rebuild(entry, parts, module, spec, target)
                    built += 1
            runs[target.threads] = AotModel(library, instances)
    except BaseException:
        for model in runs.values():
            model.close()
        raise
    return AotLoad(runs, built, loaded, time.perf_counter() - started)


def _rebuild(
    entry: CacheEntry,
    parts: dict[str, Any],
    module: torch.nn.Module,
    spec: ModelSpec,
    target: ForwardTarget,
) -> Path:
    if entry.directory.exists():
        logger.warning(
            "%s: compiled cache entry %s is stale or corrupt; rebuilding it",
            spec.name,
            entry.directory,
        )
    for abandoned in entry.directory.parent.glob(f".{entry.key}.*"):  # builds killed midway
        shutil.rmtree(abandoned, ignore_errors=True)
    started = time.perf_counter()
    what = f"{spec.name}: compiling the {target.head} head for {target.threads} thread(s)"
    with progress(logger, what):
        build(entry, parts, module, spec, target)
    library = valid_library(entry)
    if library is None:
        raise RuntimeError(f"the compiled entry {entry.directory} did not verify")
    logger.info(
        "%s: compiled ahead of time for %d thread(s) in %.1f s (cache: %s)",
        spec.name,
        target.threads,
        time.perf_counter() - started,
        entry.directory,
    )
    return library


class AotRun:
    """A compiled library as a `CompiledRun`: it takes the input ids and attention mask (for a
    packed batch the input ids, positions, segments, pooling weights, first and last token of
    each item) and, for models compiled with them, token type ids, each int64 on the CPU; a
    model compiled with token type ids gets zeros where a batch has none (what the backbone
    assumes without them)."""

    def __init__(self, model: AotModel, with_types: bool) -> None:
        self._model = model
        self._with_types = with_types

    def __call__(self, batch: TorchBatch) -> torch.Tensor:
        packed = batch.packed
        inputs: tuple[torch.Tensor, ...] = (
            (batch.input_ids, batch.attention_mask)
            if packed is None
            else (batch.input_ids, *packed)
        )
        if self._with_types:
            types = batch.token_type_ids
            inputs += (torch.zeros_like(batch.input_ids) if types is None else types,)
        return self._model(*inputs)

    def close(self) -> None:
        self._model.close()
