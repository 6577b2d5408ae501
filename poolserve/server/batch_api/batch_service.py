"""The Batch API's owner: its files, its batches and their runs, kept under `--batch-dir`.

Everything here runs on the event loop, which owns the indexes (of files: `FileStore`; of
batches: `_records`); what touches the disk runs in a thread. At start-up it reads what is on
disk and resumes every batch that had not finished (a SIGKILL'd server's too); at shutdown it
drains the runs (they checkpoint). Finished batches and every file are deleted
`--batch-retention-hours` after they end (a timer set at the next such moment); a batch's input
file is kept while the batch needs it, and from its end on counts like the others.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from poolserve.errors import ConflictError, InvalidRequestError, NotFoundError, SettingError
from poolserve.server.batch_api.batch_record import BATCH_PREFIX, BatchFolder, BatchRecord
from poolserve.server.batch_api.batch_run import BatchRun, RunDeps
from poolserve.server.batch_api.line_calls import LineCaller
from poolserve.server.batch_api.line_gate import LineGate
from poolserve.server.batch_api.stored_files import FileLimits, FileStore

logger = logging.getLogger("poolserve")

# The routes a batch may send its lines to (those the server's models serve).
BATCH_ENDPOINTS = ("/v1/embeddings", "/v1/rerank", "/v1/score", "/classify", "/pooling")
COMPLETION_WINDOWS = {"24h": 24 * 3600}
# Lines in flight, all batches together (line_gate.py): enough for the engine's batches to fill
# when nothing else asks; few while interactive requests are in flight, so that the lines'
# Python leaves them room (docs/benchmarks.md, "OpenAI's Batch API beside interactive traffic").
LINES_IN_FLIGHT = 256
LINES_BESIDE_INTERACTIVE, LINE_RATE_BESIDE_INTERACTIVE = 8, 400.0
# OpenAI's bounds on a batch's metadata.
METADATA_KEYS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512
STATUSES = (
    "validating",
    "in_progress",
    "finalizing",
    "completed",
    "failed",
    "cancelling",
    "cancelled",
    "expired",
)


class BatchService:
    def __init__(
        self,
        directory: Path,
        limits: FileLimits,
        served_routes: tuple[str, ...],
        registry: CollectorRegistry,
    ) -> None:
        self._directory = directory
        self._lock_file: BinaryIO | None = None
        self.files = FileStore(directory / "files", limits)
        self._folder = BatchFolder(directory / "batches")
        self._limits = limits
        self._served = served_routes
        self._records: dict[str, BatchRecord] = {}
        self._runs: dict[str, BatchRun] = {}
        self._saving: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweep_timer: asyncio.TimerHandle | None = None
        self._expiry_timers: dict[str, asyncio.TimerHandle] = {}
        self._deps: RunDeps | None = None
        self._lines = Counter(
            "poolserve_batch_requests",
            "Batch API request lines answered, by where they went (completed: the output file; "
            "failed: the error file)",
            ["status"],
            registry=registry,
        )
        self._ended = Counter(
            "poolserve_batches_finished",
            "Batches that ended, by status",
            ["status"],
            registry=registry,
        )
        registry.register(_BatchGauge(self))

    # Start and stop.

    @property
    def started(self) -> bool:
        return self._deps is not None

    def claim(self, *, chosen: bool) -> None:
        """Make the folder this server's alone (a lock held while the process lives), before
        the models load: where another server holds it, a folder `chosen` (--batch-dir) is a
        SettingError, the default one leaves the Batch API off, with a warning."""
        if self._lock():
            return
        message = (
            f"the batch folder {self._directory} is in use by another poolserve server; give "
            "each server a --batch-dir of its own"
        )
        if chosen:
            raise SettingError(message)
        logger.warning("%s (the Batch API is off on this one)", message)

    async def start(
        self,
        caller: LineCaller,
        room: Callable[[], Awaitable[None]],
        crowded: Callable[[], bool],
    ) -> None:
        """Read what is on disk; resume the batches that had not finished (where the folder
        was claimed)."""
        if self._lock_file is None:
            return
        for stored in await asyncio.to_thread(self.files.load):
            self.files.add(stored)
        records = await asyncio.to_thread(self._folder.load)
        self._deps = RunDeps(
            files=self.files,
            folder=self._folder,
            caller=caller,
            gate=LineGate(
                LINES_IN_FLIGHT, LINES_BESIDE_INTERACTIVE, LINE_RATE_BESIDE_INTERACTIVE, crowded
            ),
            room=room,
            publish=self._publish,
            save=self._save,
            counted_line=lambda ok: self._lines.labels("completed" if ok else "failed").inc(),
            finished=self._finished,
            retention=self._limits.retention,
        )
        for record in sorted(records, key=lambda r: r.created_at):
            self._records[record.id] = record
            if not record.finished:
                logger.info("batch %s: resuming (%s)", record.id, record.status)
                self._run(record)
        self._schedule_sweep()

    def _lock(self) -> bool:
        """Take the folder's lock; False where another process holds it."""
        self._directory.mkdir(parents=True, exist_ok=True)
        lock_file = open(self._directory / ".lock", "wb")  # noqa: SIM115 (held while it serves)
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            return False
        self._lock_file = lock_file
        return True

    def drain(self) -> None:
        """The server is stopping: the runs take no more lines (their lines in flight finish
        within the grace period)."""
        for run in self._runs.values():
            run.stop("drain")

    async def stop(self, seconds: float) -> None:
        """Drain: the runs stop taking lines and checkpoint those in flight, within `seconds`."""
        for each in (self._sweep_timer, *self._expiry_timers.values()):
            if each is not None:
                each.cancel()
        self.drain()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=seconds)
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    # Batches.

    async def create(
        self,
        input_file_id: str,
        endpoint: str,
        completion_window: str,
        metadata: dict[str, str] | None,
        output_lifetime: int | None = None,
    ) -> BatchRecord:
        if endpoint not in BATCH_ENDPOINTS:
            raise InvalidRequestError(
                f"endpoint {endpoint[:100]!r} is not one a batch can send to; use one of "
                f"{', '.join(BATCH_ENDPOINTS)}",
                param="endpoint",
            )
        if endpoint not in self._served:
            raise InvalidRequestError(
                f"no model of this server serves {endpoint}; it serves "
                f"{', '.join(e for e in BATCH_ENDPOINTS if e in self._served)}",
                param="endpoint",
            )
        window = COMPLETION_WINDOWS.get(completion_window)
        if window is None:
            raise InvalidRequestError(
                f"completion_window must be one of {', '.join(COMPLETION_WINDOWS)}; got "
                f"{completion_window[:32]!r}",
                param="completion_window",
            )
        _check_metadata(metadata)
        try:
            stored = self.files.get(input_file_id)
        except NotFoundError as exc:
            raise NotFoundError(exc.message, param="input_file_id") from None
        if stored.purpose != "batch":
            raise InvalidRequestError(
                f"file {stored.id} was uploaded with purpose {stored.purpose!r}; a batch reads a "
                'file uploaded with purpose "batch"',
                param="input_file_id",
            )
        now = int(time.time())
        record = BatchRecord(
            id=f"{BATCH_PREFIX}{secrets.token_hex(16)}",
            endpoint=endpoint,
            input_file_id=stored.id,
            completion_window=completion_window,
            status="validating",
            created_at=now,
            expires_at=now + window,
            metadata=metadata,
            output_lifetime=output_lifetime,
        )
        # The input is kept while the batch needs it.
        self.files.add(await asyncio.to_thread(self.files.held_until, stored, None))
        await self._save(record)
        self._run(record)
        return record

    def get(self, batch_id: str) -> BatchRecord:
        record = self._records.get(batch_id)
        if record is None:
            raise NotFoundError(
                f"no batch {batch_id[:64]!r} here; GET /v1/batches lists them", param="batch_id"
            )
        return record

    def listed(self, limit: int, after: str | None) -> tuple[list[BatchRecord], bool]:
        """Newest first: up to `limit` after the batch `after`, and whether more follow."""
        ordered = sorted(self._records.values(), key=lambda r: (r.created_at, r.id), reverse=True)
        if after is not None:
            ids = [record.id for record in ordered]
            ordered = ordered[ids.index(after) + 1 :] if after in ids else []
        return ordered[:limit], len(ordered) > limit

    async def cancel(self, batch_id: str) -> BatchRecord:
        record = self.get(batch_id)
        if record.finished or record.status in ("cancelling", "finalizing"):
            if record.status in ("cancelling", "cancelled"):
                return record
            raise ConflictError(
                f"batch {record.id} is {record.status}; only a batch that is validating or "
                "in progress can be cancelled"
            )
        run = self._runs.get(record.id)
        if run is None:  # paused (its engine could not take work): it ends when it resumes
            raise ConflictError(f"batch {record.id} is not running; restart the server first")
        run.stop("cancelled")
        cancelling = run.record
        await self._save(cancelling)
        return cancelling

    def reads(self, file_id: str) -> BatchRecord | None:
        """The unfinished batch that reads this file, if any."""
        return next(
            (r for r in self._records.values() if r.input_file_id == file_id and not r.finished),
            None,
        )

    async def delete_file(self, file_id: str) -> None:
        reading = self.reads(file_id)
        if reading is not None:
            raise ConflictError(
                f"batch {reading.id} ({reading.status}) reads file {file_id}; cancel it first"
            )
        stored = self.files.forget(file_id)
        await asyncio.to_thread(self.files.remove, stored)

    def files_changed(self) -> None:
        """A file came or went: the next expiry may be another."""
        self._schedule_sweep()

    def statuses(self) -> dict[str, int]:
        """The batches by status (read from the metrics' thread: a copy of the index)."""
        counts = dict.fromkeys(STATUSES, 0)
        for record in list(self._records.values()):
            counts[record.status] += 1
        return counts

    # Runs, records, retention.

    def _run(self, record: BatchRecord) -> None:
        assert self._deps is not None, "start the service first"
        run = BatchRun(record, self._deps)
        self._runs[record.id] = run
        loop = asyncio.get_running_loop()
        delay = max(0.0, record.expires_at - time.time())
        self._expiry_timers[record.id] = loop.call_later(delay, run.stop, "expired")
        task = loop.create_task(run.run(), name=f"poolserve-{record.id}")
        self._tasks.add(task)

        def ended(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if self._runs.get(record.id) is run:
                del self._runs[record.id]
            timer = self._expiry_timers.pop(record.id, None)
            if timer is not None:
                timer.cancel()

        task.add_done_callback(ended)

    def _publish(self, record: BatchRecord) -> None:
        self._records[record.id] = record

    async def _save(self, record: BatchRecord) -> None:
        """Keep `record`; on disk, one write at a time a batch, the newest record last."""
        self._records[record.id] = record
        async with self._saving.setdefault(record.id, asyncio.Lock()):
            await asyncio.to_thread(self._folder.save, self._records[record.id])

    async def _finished(self, record: BatchRecord) -> None:
        """A batch ended: its input file counts like the others from now on."""
        self._ended.labels(record.status).inc()
        try:
            stored = self.files.get(record.input_file_id)
        except NotFoundError:
            pass
        else:
            until = int(time.time() + self._limits.retention)
            self.files.add(await asyncio.to_thread(self.files.held_until, stored, until))
        self._schedule_sweep()

    def _schedule_sweep(self) -> None:
        """A timer at the next moment a file or a finished batch is due to go."""
        moments = [r.forget_at for r in self._records.values() if r.forget_at is not None]
        file_expiry = self.files.next_expiry()
        if file_expiry is not None:
            moments.append(file_expiry)
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
        if not moments:
            self._sweep_timer = None
            return
        delay = max(0.0, min(moments) - time.time())
        loop = asyncio.get_running_loop()
        self._sweep_timer = loop.call_later(delay, self._start_sweep)

    def _start_sweep(self) -> None:
        task = asyncio.get_running_loop().create_task(self._sweep())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sweep(self) -> None:
        now = time.time()
        for record in list(self._records.values()):
            if record.forget_at is not None and record.forget_at <= now:
                del self._records[record.id]
                self._saving.pop(record.id, None)
                await asyncio.to_thread(self._folder.remove, record.id)
                logger.info("batch %s deleted: past its retention", record.id)
        for file_id in self.files.expired(now):
            if self.reads(file_id) is None:
                await asyncio.to_thread(self.files.remove, self.files.forget(file_id))
                logger.info("file %s deleted: past its retention", file_id)
        self._schedule_sweep()


def _check_metadata(metadata: dict[str, str] | None) -> None:
    if metadata is None:
        return
    if len(metadata) > METADATA_KEYS:
        raise InvalidRequestError(
            f"metadata holds {len(metadata)} keys; at most {METADATA_KEYS}", param="metadata"
        )
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_CHARS or len(value) > METADATA_VALUE_CHARS:
            raise InvalidRequestError(
                f"metadata key {key[:METADATA_KEY_CHARS]!r}: keys hold at most "
                f"{METADATA_KEY_CHARS} characters, values {METADATA_VALUE_CHARS}",
                param="metadata",
            )


class _BatchGauge(Collector):
    """`poolserve_batches{status}`: the batches kept, by status."""

    def __init__(self, service: BatchService) -> None:
        self._service = service

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily("poolserve_batches", "Batches kept, by status", labels=["status"])
        for status, count in self._service.statuses().items():
            gauge.add_metric([status], count)
        yield gauge
