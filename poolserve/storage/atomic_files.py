"""Files that are whole or absent: each written under a temporary name beside its place,
flushed to disk and renamed into place (and the folder's entry flushed too), so a kill, even
SIGKILL, leaves either the old file or the new one, never a part of one. Temporary files are
named `.NAME.tmp`: a restart deletes them."""

from __future__ import annotations

import os
from pathlib import Path


def temporary(path: Path) -> Path:
    """Where `path` is written before it is renamed into place."""
    return path.with_name(f".{path.name}.tmp")


def write_atomically(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all."""
    written = temporary(path)
    written.write_bytes(data)
    sync_and_rename(written, path)


def sync_and_rename(written: Path, path: Path) -> None:
    """Flush `written` to disk and rename it to `path` (replacing what was there)."""
    with open(written, "rb") as file:
        os.fsync(file.fileno())
    os.replace(written, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
