"""A batch as it is kept: OpenAI's batch object (`BatchRecord.wire`), and its folder under
`--batch-dir`/batches (`BatchFolder`).

A batch's folder holds `batch.json` (its record) and its answered lines, in checkpoints
`done-N.jsonl` written atomically (storage/atomic_files.py), each line `INDEX OK LINE`: the request
line's place in the input, 1 if it goes to the output file (else the error file), and its
output line. A line is in at most one checkpoint, so after a kill, even SIGKILL, the
checkpoints on disk name the lines done, and the rest run again: nothing is lost, nothing is
answered twice. The output and error files are made from them, in input order, at the end.
"""

from __future__ import annotations

import heapq
import re
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from poolserve.storage.atomic_files import write_atomically

BATCH_PREFIX = "batch_"
RECORD = "batch.json"
CHECKPOINT = re.compile(r"done-(\d{6})\.jsonl")
# Statuses a batch stays in; any other is on the way there (resumed at start-up).
FINISHED = ("completed", "failed", "expired", "cancelled")


@dataclass(frozen=True)
class BatchRecord:
    """OpenAI's batch object, and when the batch may be deleted once finished."""

    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: int
    expires_at: int
    metadata: dict[str, str] | None = None
    # Seconds its output and error files are kept (OpenAI's `output_expires_after`; None: the
    # retention).
    output_lifetime: int | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    errors: list[dict[str, Any]] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    # When it is deleted, with its files (once finished: --batch-retention-hours later).
    forget_at: int | None = None
    # Why it stopped before its end, where it did (cancelled or expired): the status it ends in.
    ending: str | None = field(default=None)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def wire(self) -> dict[str, Any]:
        """OpenAI's batch object."""
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": None if self.errors is None else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "in_progress_at": self.in_progress_at,
            "expires_at": self.expires_at,
            "finalizing_at": self.finalizing_at,
            "completed_at": self.completed_at,
            "failed_at": self.failed_at,
            "expired_at": self.expired_at,
            "cancelling_at": self.cancelling_at,
            "cancelled_at": self.cancelled_at,
            "request_counts": {
                "total": self.total,
                "completed": self.completed,
                "failed": self.failed,
            },
            "metadata": self.metadata,
        }


@dataclass(frozen=True)
class Done:
    """What a batch's checkpoints hold."""

    lines: set[int]
    completed: int
    failed: int
    checkpoints: int


class BatchFolder:
    """The batches under `directory`, one folder each. Every method touches the disk: call it
    in a thread."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def load(self) -> list[BatchRecord]:
        """Every batch's record (temporary files deleted)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        records = []
        for folder in self.directory.glob(f"{BATCH_PREFIX}*"):
            for leftover in folder.glob(".*.tmp"):
                leftover.unlink()
            if (folder / RECORD).is_file():
                records.append(BatchRecord(**orjson.loads((folder / RECORD).read_bytes())))
            else:  # created, killed before its record was written
                shutil.rmtree(folder)
        return records

    def save(self, record: BatchRecord) -> None:
        folder = self.directory / record.id
        folder.mkdir(parents=True, exist_ok=True)
        write_atomically(folder / RECORD, orjson.dumps(asdict(record)))

    def done(self, batch_id: str) -> Done:
        lines: set[int] = set()
        completed = failed = checkpoints = 0
        for path in self._checkpoints(batch_id):
            checkpoints += 1
            for entry in path.read_bytes().splitlines():
                index, ok, _ = entry.split(b" ", 2)
                lines.add(int(index))
                if ok == b"1":
                    completed += 1
                else:
                    failed += 1
        return Done(lines, completed, failed, checkpoints)

    def checkpoint(
        self, batch_id: str, number: int, answered: list[tuple[int, bool, bytes]]
    ) -> None:
        """Checkpoint `number`: lines answered since the last, as (index, ok, output line)."""
        entries = [b"%d %d %s\n" % (index, ok, line) for index, ok, line in sorted(answered)]
        path = self.directory / batch_id / f"done-{number:06d}.jsonl"
        write_atomically(path, b"".join(entries))

    def answered(self, batch_id: str, ok: bool) -> Iterator[bytes]:
        """The output lines (`ok`) or error lines, in input order, each ending in a newline."""

        def entries(path: Path) -> Iterator[tuple[int, bytes, bytes]]:
            with open(path, "rb") as file:
                for entry in file:
                    index, good, line = entry.rstrip(b"\n").split(b" ", 2)
                    yield int(index), good, line

        flag = b"1" if ok else b"0"
        merged = heapq.merge(*(entries(path) for path in self._checkpoints(batch_id)))
        for _, good, line in merged:
            if good == flag:
                yield line + b"\n"

    def drop_checkpoints(self, batch_id: str) -> None:
        """Once the output and error files are made from them."""
        for path in self._checkpoints(batch_id):
            path.unlink()

    def remove(self, batch_id: str) -> None:
        shutil.rmtree(self.directory / batch_id, ignore_errors=True)

    def _checkpoints(self, batch_id: str) -> list[Path]:
        folder = self.directory / batch_id
        return sorted(p for p in folder.glob("done-*.jsonl") if CHECKPOINT.fullmatch(p.name))
