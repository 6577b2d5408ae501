"""The Batch API's files (`/v1/files`): their bytes and their records under `--batch-dir`/files.

A file is `ID` (its bytes) and `ID.json` (its record: OpenAI's file object), each written atomically
(storage/atomic_files.py), the bytes first: a record names a whole file. An upload streams into a
temporary file and becomes a file only when it is whole and within the bounds; a restart deletes
temporary files and bytes without a record. Ids are 96 random bits; a path is built only from an id
this store made, never from what a client sends (`get` looks the id up first).

The index lives in memory, owned by the event loop (every call here is made from it); what
touches the disk runs in a thread, called by the owner (`BatchService`) through `asyncio`.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from poolserve.errors import NotFoundError, PayloadTooLargeError, StorageFullError
from poolserve.storage.atomic_files import sync_and_rename, temporary, write_atomically

FILE_PREFIX = "file-"


@dataclass(frozen=True)
class StoredFile:
    """A file's record: OpenAI's file object, and its line count."""

    id: str
    filename: str
    purpose: str
    bytes: int
    lines: int
    created_at: int
    expires_at: int | None = None

    def wire(self) -> dict[str, Any]:
        """OpenAI's file object."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


@dataclass(frozen=True)
class FileLimits:
    file_bytes: int
    file_lines: int
    folder_bytes: int
    # Seconds a file is kept from its upload (a batch's input: from when the batch ends).
    retention: float


class Upload:
    """A file being written: counts its bytes and lines as they come, refusing (413, 507) the
    chunk that passes a bound. Its methods write to disk: call them in a thread."""

    def __init__(self, path: Path, limits: FileLimits, room: int, full: str) -> None:
        self.path = path
        self._limits = limits
        # What the folder had room for when it began, and the 507's message.
        self._room = room
        self._full = full
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 (closed by finish or discard)
        self.bytes = 0
        self.lines = 0
        self._ends_line = True

    def write(self, chunk: bytes) -> None:
        self.bytes += len(chunk)
        if self.bytes > self._limits.file_bytes:
            raise PayloadTooLargeError(too_large(self._limits))
        if self.bytes > self._room:
            raise StorageFullError(self._full)
        if chunk:
            self.lines += chunk.count(b"\n")
            self._ends_line = chunk.endswith(b"\n")
        if self.lines + (not self._ends_line) > self._limits.file_lines:
            raise PayloadTooLargeError(
                f"the file has more than {self._limits.file_lines:,} lines, the most one batch "
                "takes; split it into several batches"
            )
        self._file.write(chunk)

    def finish(self) -> tuple[int, int]:
        """Close it: its bytes and lines."""
        self._file.close()
        return self.bytes, self.lines + (not self._ends_line)

    def discard(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


def too_large(limits: FileLimits) -> str:
    return (
        f"the file is larger than this server takes ({limits.file_bytes:,} bytes, "
        "--max-batch-file-bytes); split it into several batches"
    )


class FileStore:
    """The files under `directory`: upload, look up, list, read, delete, expire. The index is
    the event loop's: methods that say "in a thread" touch only the disk, and hand back what
    the loop then adds (`add`) or has already taken out (`forget`)."""

    def __init__(self, directory: Path, limits: FileLimits) -> None:
        self.directory = directory
        self.limits = limits
        self._files: dict[str, StoredFile] = {}

    def load(self) -> list[StoredFile]:
        """The records on disk, temporary files and bytes without a record deleted (in a
        thread, at start-up; `add` each)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.glob(".*.tmp"):
            leftover.unlink()
        found = [
            StoredFile(**orjson.loads(record.read_bytes()))
            for record in self.directory.glob(f"{FILE_PREFIX}*.json")
        ]
        named = {stored.id for stored in found}
        for content in self.directory.glob(f"{FILE_PREFIX}*"):
            if content.suffix != ".json" and content.name not in named:
                content.unlink()
        return found

    @property
    def held_bytes(self) -> int:
        return sum(each.bytes for each in self._files.values())

    def full_message(self, more: int | None = None) -> str:
        held, bound = self.held_bytes, self.limits.folder_bytes
        passing = f"; this file would pass it by {held + more - bound:,}" if more else ""
        return (
            f"the batch folder holds {held:,} bytes of the {bound:,} it may hold in all "
            f"(--max-batch-dir-bytes){passing}: delete files (DELETE /v1/files/{{id}}) or wait "
            "for finished batches to expire"
        )

    def upload(self, declared: int | None = None) -> Upload:
        """Begin an upload; `declared`: its size where known, refused at once past a bound.
        Opens a file: call it in a thread."""
        if declared is not None and declared > self.limits.file_bytes:
            raise PayloadTooLargeError(too_large(self.limits))
        room = self.limits.folder_bytes - self.held_bytes
        if declared is not None and declared > room:
            raise StorageFullError(self.full_message(declared))
        self.directory.mkdir(parents=True, exist_ok=True)
        path = temporary(self.directory / f"upload-{secrets.token_hex(8)}")
        return Upload(path, self.limits, room, self.full_message())

    def keep(
        self, upload: Upload, filename: str, purpose: str, lifetime: float | None = None
    ) -> StoredFile:
        """A finished upload as a new file, kept `lifetime` seconds (default: the retention),
        in a thread; then `add` it."""
        size, lines = upload.finish()
        now = int(time.time())
        lifetime = (
            self.limits.retention if lifetime is None else min(lifetime, self.limits.retention)
        )
        stored = StoredFile(
            id=f"{FILE_PREFIX}{secrets.token_hex(12)}",
            filename=filename,
            purpose=purpose,
            bytes=size,
            lines=lines,
            created_at=now,
            expires_at=now + int(lifetime),
        )
        sync_and_rename(upload.path, self._path(stored.id))
        write_atomically(self._record(stored.id), orjson.dumps(asdict(stored)))
        return stored

    def keep_lines(
        self,
        lines: Iterator[bytes],
        filename: str,
        purpose: str,
        lifetime: float | None = None,
    ) -> StoredFile | None:
        """A new file of `lines` (each ending in a newline), None where there are none (in a
        thread: a batch's output; then `add` it). Outputs are not refused for room: the
        batch that makes them was accepted."""
        limits = replace(self.limits, file_bytes=2**63, file_lines=2**63)
        path = temporary(self.directory / f"output-{secrets.token_hex(8)}")
        upload = Upload(path, limits, 2**63, "")
        try:
            for line in lines:
                upload.write(line)
        except BaseException:
            upload.discard()
            raise
        if not upload.lines:
            upload.discard()
            return None
        return self.keep(upload, filename, purpose, lifetime)

    def add(self, stored: StoredFile) -> None:
        self._files[stored.id] = stored

    def get(self, file_id: str) -> StoredFile:
        stored = self._files.get(file_id)
        if stored is None:
            raise NotFoundError(
                f"no file {file_id[:64]!r} here; GET /v1/files lists them", param="file_id"
            )
        return stored

    def path(self, file_id: str) -> Path:
        """Where a file's bytes are (it must exist: `get` first)."""
        return self._path(self.get(file_id).id)

    def listed(self, purpose: str | None = None, *, newest_first: bool = True) -> list[StoredFile]:
        files = [f for f in self._files.values() if purpose is None or f.purpose == purpose]
        return sorted(files, key=lambda f: (f.created_at, f.id), reverse=newest_first)

    def forget(self, file_id: str) -> StoredFile:
        """Take a file out of the index (then `remove` it in a thread)."""
        return self._files.pop(self.get(file_id).id)

    def remove(self, stored: StoredFile) -> None:
        """Delete a forgotten file's record and bytes (in a thread)."""
        self._record(stored.id).unlink(missing_ok=True)
        self._path(stored.id).unlink(missing_ok=True)

    def held_until(self, stored: StoredFile, until: int | None) -> StoredFile:
        """`stored`, kept until `until` (epoch seconds; None: until deleted), as a batch
        reading it needs (in a thread; then `add` it)."""
        held = replace(stored, expires_at=until)
        write_atomically(self._record(held.id), orjson.dumps(asdict(held)))
        return held

    def expired(self, now: float) -> list[str]:
        return [
            f.id for f in self._files.values() if f.expires_at is not None and f.expires_at <= now
        ]

    def next_expiry(self) -> int | None:
        return min((f.expires_at for f in self._files.values() if f.expires_at), default=None)

    def _path(self, file_id: str) -> Path:
        return self.directory / file_id

    def _record(self, file_id: str) -> Path:
        return self.directory / f"{file_id}.json"


def remove_tree(directory: Path) -> None:
    """Remove a folder of plain files (a batch's)."""
    if directory.is_dir():
        for each in directory.iterdir():
            each.unlink()
        os.rmdir(directory)
