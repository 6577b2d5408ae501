"""The cache on disk of what is built from the loaded model's main head (`POOLSERVE_CACHE_DIR/
<family>/<key>/`: torch's compiled libraries, the exported ONNX graphs): what an entry is built
for (`ForwardTarget`), the key that names it (a hash of everything its code depends on: the
model files' contents, the served kind and head, dtype and device, the length limit, the torch
and transformers versions, the loaded model's and the torch runtime's code, the CPU's
instruction set and the thread count), whether its library is the one its manifest recorded
(`valid_library`), and the lock that lets one process at a time check and build it."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import platform
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from poolserve.backends.torch_model import device
from poolserve.models.kinds import Head
from poolserve.models.spec import ModelSpec

# Bumped when what an entry holds, or how it is built, changes.
FORMAT = 1
MANIFEST = "entry.json"
# Files of a model directory that no forward reads: other runtimes' weights and documentation.
_UNREAD_DIRECTORIES = frozenset({"onnx", "openvino", ".git", ".cache"})
_UNREAD_SUFFIXES = frozenset({".onnx", ".h5", ".msgpack", ".ot", ".md", ".gitattributes"})
_HASH_CHUNK = 1 << 22


@dataclass(frozen=True)
class ForwardTarget:
    """What one library is compiled for."""

    head: Head
    threads: int
    with_token_types: bool
    max_batch_size: int
    # Packed batches (engine/collate.py) instead of padded ones.
    packed: bool = False
    # A padded forward that takes the pooling mask as an input of its own.
    with_pool_mask: bool = False


@dataclass(frozen=True)
class CacheEntry:
    key: str
    directory: Path

    @property
    def manifest(self) -> Path:
        return self.directory / MANIFEST


def files_digest(directory: Path) -> str:
    """The contents (and relative names) of the model files a forward depends on (read once
    per process while the files' sizes and modification times stay: a start asks for it for
    every cache it consults, and a model's weights take a tenth of a second per 100 MB)."""
    paths = sorted(_model_files(directory))
    signature = tuple(
        (str(path.relative_to(directory)), stat.st_size, stat.st_mtime_ns)
        for path, stat in ((path, path.stat()) for path in paths)
    )
    return _contents_digest(directory, signature)


@functools.lru_cache(maxsize=16)
def _contents_digest(directory: Path, signature: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in signature:
        digest.update(name.encode() + b"\0")
        with (directory / name).open("rb") as file:
            while chunk := file.read(_HASH_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def _model_files(directory: Path) -> Iterable[Path]:
    for root, directories, files in os.walk(directory):
        directories[:] = [name for name in directories if name not in _UNREAD_DIRECTORIES]
        for name in files:
            path = Path(root) / name
            if path.suffix not in _UNREAD_SUFFIXES and name not in _UNREAD_SUFFIXES:
                yield path


def _code_digest() -> str:
    """The loaded model's code (the modules the exported graph is traced from), the torch
    runtime's (how it is compiled) and the model descriptions it reads (models/)."""
    digest = hashlib.sha256()
    backends = Path(__file__).resolve().parent.parent
    folders = (backends / "torch_model", backends / "torch", backends.parent / "models")
    for path in (path for folder in folders for path in sorted(folder.glob("*.py"))):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cpu_identity() -> str:
    """The CPU a measurement or a kernel was made for: its instruction set (the flags, the
    machine type, torch's kernels' capability) and its model (CPUs with the same flags differ
    in speed)."""
    words = " ".join(sorted(device.cpu_flags()))
    return (
        f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()} "
        + hashlib.sha256(f"{device.cpu_model()}\n{words}".encode()).hexdigest()[:16]
    )


def measured_on(spec: ModelSpec) -> dict[str, Any]:
    """What a measurement of `spec` on this machine depends on beside its own settings (the
    precision and engine choices' keys): the CPU's instruction set and the model's files,
    kind, main head and attention."""
    return {
        "cpu": cpu_identity(),
        "model_files": files_digest(spec.layout.directory),
        "kind": spec.kind,
        "head": spec.heads[0],
        "attention": spec.attention,
    }


def keyed_file(root: Path, family: str, parts: dict[str, Any]) -> Path:
    """`root/family/<hash of parts>.json`: where a measurement keyed by `parts` is kept."""
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:40]
    return root / family / f"{key}.json"


def write_json(path: Path, data: Any) -> None:
    """`data` kept at `path` for the next start: written whole, then renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps(data), encoding="utf-8")
    staging.replace(path)


def key_parts(spec: ModelSpec, target: ForwardTarget) -> dict[str, Any]:
    """Everything an entry's code depends on; its hash names the entry."""
    import transformers

    template = spec.score_template
    return {
        "format": FORMAT,
        "model_files": files_digest(spec.layout.directory),
        "poolserve_models": _code_digest(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu": cpu_identity(),
        "kind": spec.kind,
        "head": target.head,
        "dtype": spec.dtype,
        "device": spec.device,
        "max_model_len": spec.max_model_len,
        "max_batch_size": target.max_batch_size,
        "threads": target.threads,
        "with_token_types": target.with_token_types,
        "packed": target.packed,
        "with_pool_mask": target.with_pool_mask,
        "attention": spec.attention,
        "trust_remote_code": spec.trust_remote_code,
        "score_template": None if template is None else repr(template),
    }


def entry_for(
    root: Path,
    spec: ModelSpec,
    target: ForwardTarget,
    *,
    family: str = "aot",
    extra: dict[str, Any] | None = None,
) -> tuple[CacheEntry, dict[str, Any]]:
    """The entry under `root/family/` for `target` (`extra`: what else its contents depend on,
    such as another runtime's version)."""
    parts = {**key_parts(spec, target), **(extra or {})}
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:40]
    return CacheEntry(key, root / family / key), parts


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def valid_library(entry: CacheEntry) -> Path | None:
    """The entry's library if it is the one its manifest recorded; None for a truncated or
    replaced library, or a missing or unreadable manifest."""
    try:
        manifest = json.loads(entry.manifest.read_text(encoding="utf-8"))
        library = entry.directory / str(manifest["library"])
        if (
            manifest.get("key") == entry.key
            and library.parent == entry.directory
            and library.stat().st_size == manifest["library_bytes"]
            and sha256(library) == manifest["library_sha256"]
        ):
            return library
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


@contextmanager
def locked(entry: CacheEntry) -> Iterator[None]:
    """The entry to this process alone while it is checked and (re)built: processes starting
    together (Ray replicas on one host) build it once, and none deletes it under another."""
    entry.directory.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.directory.parent / f"{entry.key}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
