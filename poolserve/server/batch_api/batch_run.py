"""One batch, run: validated, its lines answered in the lowest lane and checkpointed, then its
output and error files made (`BatchRun.run`).

Status: validating → in_progress → finalizing → completed; failed where the input is not a batch
(`batch_input.check_input`); cancelling → cancelled (`stop("cancelled")`), or expired at the
end of its completion window (`stop("expired")`: the lines not answered go to the error file as
`batch_expired`). `stop("drain")` (the server is stopping) lets the lines in flight finish and
checkpoints them; the batch stays in_progress and the next start resumes it, running only the
lines no checkpoint holds (batch_record.py).

A line is answered by its route (line_calls.py): a 2xx goes to the output file, any other status
to the error file, each as OpenAI's line `{"id", "custom_id", "response": {"status_code",
"request_id", "body"}, "error"}`. A line the door turns away (429) tries again once a request
leaves; one the server could not run (503, or cancelled) is not answered and runs again later.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

import orjson

from poolserve.server.batch_api.batch_input import RequestLine, check_input, pending_lines, take
from poolserve.server.batch_api.batch_record import BatchFolder, BatchRecord
from poolserve.server.batch_api.line_calls import LineAnswer, LineCaller
from poolserve.server.batch_api.line_gate import LineGate
from poolserve.server.batch_api.stored_files import FileStore

logger = logging.getLogger("poolserve")

Stop = Literal["drain", "cancelled", "expired"]
# Lines read from the input at a time, and answered between two checkpoints (at most what a
# SIGKILL makes run again).
READ_LINES = 256
CHECKPOINT_LINES = 512
EXPIRED = orjson.dumps(
    {
        "code": "batch_expired",
        "message": "This request could not be executed before the completion window expired.",
    }
)
# The statuses of a line that was not answered: it runs again (or never: cancelled).
NOT_ANSWERED = (429, 499, 503)


@dataclass(frozen=True)
class RunDeps:
    """What a run uses, shared by every batch of the server."""

    files: FileStore
    folder: BatchFolder
    caller: LineCaller
    # Lines in flight, all batches together.
    gate: LineGate
    # Completes when the door next lets a request go (a line turned away waits on it).
    room: Callable[[], Awaitable[None]]
    # Keep a record: in memory (`publish`), and on disk too (`save`).
    publish: Callable[[BatchRecord], None]
    save: Callable[[BatchRecord], Awaitable[None]]
    # A line answered (ok or not); a batch finished (its input file is let go, it is counted).
    counted_line: Callable[[bool], None]
    finished: Callable[[BatchRecord], Awaitable[None]]
    retention: float


def output_line(custom_id: str, request_id: str, answer: LineAnswer) -> bytes:
    """OpenAI's output (or error) line for an answered request, its body as the route sent it."""
    head = orjson.dumps(
        {
            "id": f"batch_req_{request_id}",
            "custom_id": custom_id,
            "response": {"status_code": answer.status, "request_id": request_id},
        }
    )
    # The body is spliced in as the route encoded it: `{..., "response": {..., "body": BODY}`.
    return head[:-2] + b',"body":' + (answer.body or b"null") + b'},"error":null}'


def expired_line(custom_id: str) -> bytes:
    return b'{"id":"batch_req_%s","custom_id":%s,"response":null,"error":%s}' % (
        secrets.token_hex(16).encode(),
        orjson.dumps(custom_id),
        EXPIRED,
    )


class BatchRun:
    def __init__(self, record: BatchRecord, deps: RunDeps) -> None:
        self.record = record
        self._deps = deps
        self._stop = asyncio.Event()
        # Set when the lines in flight should go (cancelled, expired): their work is cancelled.
        self._gone = asyncio.Event()
        self._why: Stop | None = None
        self._answered: list[tuple[int, bool, bytes]] = []
        self._checkpoints = 0
        self._started = time.monotonic()
        # Request ids: a random prefix a run and a counter (os.urandom a line cost the event
        # loop a fifth of its time at 800 lines a second).
        self._id_prefix = secrets.token_hex(12)
        self._line_numbers = itertools.count()

    def stop(self, why: Stop) -> None:
        """Take no more lines: to drain (the lines in flight finish), or to end the batch
        cancelled or expired (their work is cancelled)."""
        if self._why in ("cancelled", "expired"):
            return  # it is ending already
        if why == "cancelled":
            cancelling = int(time.time())
            self.record = replace(
                self.record, status="cancelling", cancelling_at=cancelling, ending="cancelled"
            )
            self._deps.publish(self.record)
        self._why = why
        self._stop.set()
        if why != "drain":
            self._gone.set()

    async def run(self) -> None:
        try:
            await self._run()
        except Exception:
            logger.exception(
                "batch %s: stopped by an error; it resumes at the next start", self.record.id
            )

    async def _update(self, *, save: bool = True, **changes: Any) -> None:
        self.record = replace(self.record, **changes)
        if save:
            await self._deps.save(self.record)
        else:
            self._deps.publish(self.record)

    async def _run(self) -> None:
        deps, record = self._deps, self.record
        path = deps.files.path(record.input_file_id)
        if record.status == "validating":
            total, errors = await asyncio.to_thread(check_input, path, record.endpoint)
            if errors:
                now = int(time.time())
                await self._update(
                    status="failed",
                    failed_at=now,
                    errors=[error.wire() for error in errors],
                    forget_at=now + int(deps.retention),
                )
                await deps.finished(self.record)
                logger.info("batch %s failed validation: %s", record.id, errors[0].message)
                return
            if self._why == "drain":
                return  # validated again at the next start
            if self._why is None:
                now = int(time.time())
                await self._update(status="in_progress", in_progress_at=now, total=total)
                logger.info("batch %s: %d requests to %s", record.id, total, record.endpoint)
            else:
                await self._update(total=total)
        if self.record.status == "in_progress":
            done = await asyncio.to_thread(deps.folder.done, record.id)
            self._checkpoints = done.checkpoints
            await self._update(save=False, completed=done.completed, failed=done.failed)
            if done.lines:
                logger.info(
                    "batch %s: resumed, %d requests answered before", record.id, len(done.lines)
                )
            if time.time() >= record.expires_at:
                self._why = "expired"
            else:
                await self._answer_lines(path, done.lines)
            if self._why == "drain":
                return
            ending = self._why or "completed"
            await self._update(status="finalizing", finalizing_at=int(time.time()), ending=ending)
        elif self.record.status in ("validating", "cancelling"):
            # Cancelled (or expired) before it ran a line.
            ending = self._why if self._why in ("cancelled", "expired") else "cancelled"
            await self._update(status="finalizing", finalizing_at=int(time.time()), ending=ending)
        await self._finish(path)

    async def _answer_lines(self, path: Any, done: set[int]) -> None:
        deps = self._deps
        lines = pending_lines(path, self.record.endpoint, done)
        in_flight: set[asyncio.Task[None]] = set()
        while not self._stop.is_set():
            read = await asyncio.to_thread(take, lines, READ_LINES)
            if not read:
                break
            for line in read:
                await deps.gate.enter()
                if self._stop.is_set():
                    await deps.gate.leave()
                    break
                task = asyncio.create_task(self._answer(line))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
            if len(self._answered) >= CHECKPOINT_LINES:
                await self._checkpoint()
        await asyncio.gather(*in_flight)
        await self._checkpoint()

    async def _answer(self, line: RequestLine) -> None:
        deps = self._deps
        request_id = f"{self._id_prefix}{next(self._line_numbers):08x}"
        try:
            while True:
                answer = await deps.caller.call(
                    self.record.endpoint,
                    line.body,
                    request_id,
                    own_priority=line.own_priority,
                    gone=self._gone,
                )
                if answer.status != 429 or self._stop.is_set():
                    break
                await self._room_or_stop()
            if answer.status == 503 and not self._stop.is_set():
                logger.warning(
                    "batch %s: paused, the engine cannot take work (503); it resumes at the "
                    "next start",
                    self.record.id,
                )
                self.stop("drain")
            if answer.status in NOT_ANSWERED:
                return
            ok = 200 <= answer.status < 300
            self._answered.append((line.index, ok, output_line(line.custom_id, request_id, answer)))
            if ok:
                await self._update(save=False, completed=self.record.completed + 1)
            else:
                await self._update(save=False, failed=self.record.failed + 1)
            deps.counted_line(ok)
        finally:
            await deps.gate.leave()

    async def _room_or_stop(self) -> None:
        """Until a request leaves the door, or the run is told to stop."""
        waits = {asyncio.ensure_future(self._deps.room()), asyncio.ensure_future(self._stop.wait())}
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for each in pending:
            each.cancel()

    async def _checkpoint(self) -> None:
        if not self._answered:
            return
        answered, self._answered = self._answered, []
        self._checkpoints += 1
        await asyncio.to_thread(
            self._deps.folder.checkpoint, self.record.id, self._checkpoints, answered
        )
        await self._update()
        record = self.record
        done = record.completed + record.failed
        rate = len(answered) / max(time.monotonic() - self._started, 1e-3)
        self._started = time.monotonic()
        logger.info(
            "batch %s: %d of %d requests answered (%d failed), %.0f a second",
            record.id,
            done,
            record.total,
            record.failed,
            rate,
        )

    async def _finish(self, path: Any) -> None:
        """Make the output and error files, and end in the status the run stopped for."""
        deps, record = self._deps, self.record
        ending = record.ending or "completed"
        if ending == "expired":
            await self._expire_the_rest(path)
        output, errors = [
            await asyncio.to_thread(
                deps.files.keep_lines,
                deps.folder.answered(record.id, ok),
                f"{record.id}_{name}.jsonl",
                "batch_output",
                record.output_lifetime,
            )
            for ok, name in ((True, "output"), (False, "error"))
        ]
        for made in (output, errors):
            if made is not None:
                deps.files.add(made)
        now = int(time.time())
        await self._update(
            status=ending,
            output_file_id=output.id if output else None,
            error_file_id=errors.id if errors else None,
            forget_at=now + int(deps.retention),
            **{f"{ending}_at": now},  # type: ignore[arg-type]
        )
        await asyncio.to_thread(deps.folder.drop_checkpoints, record.id)
        await deps.finished(self.record)
        logger.info(
            "batch %s %s: %d requests answered, %d failed",
            record.id,
            ending,
            self.record.completed,
            self.record.failed,
        )

    async def _expire_the_rest(self, path: Any) -> None:
        """The lines not answered, as `batch_expired` error lines (one last checkpoint)."""
        done = await asyncio.to_thread(self._deps.folder.done, self.record.id)
        rest = await asyncio.to_thread(
            lambda: list(pending_lines(path, self.record.endpoint, done.lines))
        )
        self._answered = [(line.index, False, expired_line(line.custom_id)) for line in rest]
        self._checkpoints = done.checkpoints
        self.record = replace(self.record, failed=done.failed + len(rest), completed=done.completed)
        await self._checkpoint()
