"""`poolserve embed`: a corpus in, its embeddings out, resumable and in bounded memory.

The input is read a part at a time (`PartStore.part_rows` records). Each part's texts go to the
engine sorted by length (its batches then pad little) while the next parts are read and
tokenized; at most `PARTS_IN_FLIGHT` parts are held at once, whatever the input's size. Results
are written in input order, one part file each (see `parts.py`), which is what makes a killed job
resumable: the rerun skips the records of the parts on disk.

A record the engine refuses (too long for the model without truncation) is a bad row like a
missing field: reported with its line and reason, then skipped or the job stopped
(`on_error`). No record is dropped without a line in the errors file.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from poolserve.bulk.corpus import (
    DEFAULT_ID_FIELD,
    BadRow,
    InputError,
    InputSpec,
    Record,
    Row,
    check_columns,
    count_records,
    read_records,
)
from poolserve.bulk.job_progress import Progress
from poolserve.bulk.outputs import OutputKind, assemble, collect_errors, write_space
from poolserve.bulk.parts import JobStateError, PartStore
from poolserve.config.job_config import JobOptions
from poolserve.config.priorities import LOWEST_PRIORITY

if TYPE_CHECKING:
    from poolserve.tasks.counted_embed import CountedEmbeddings

logger = logging.getLogger(__name__)

PARTS_IN_FLIGHT = 3
# A part goes to the engine in calls of at most this many records (length-sorted runs of it),
# each counted as done when it returns: progress moves within a part, not a part at a time.
CALL_ROWS = 256


class PartEmbedder(Protocol):
    """What the job needs of an engine: `poolserve.Engine`, or actors on Ray (`poolserve.ray`)."""

    name: str
    embedding_dim: int

    def embedding_space(
        self, *, normalize: bool | None = None, dimensions: int | None = None
    ) -> str: ...

    def embed_counted_later(
        self,
        texts: Sequence[str],
        *,
        normalize: bool | None = None,
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        skip_too_long: bool = False,
        images: bool = False,
        priority: int = LOWEST_PRIORITY,
    ) -> Future[CountedEmbeddings]: ...


class BadRowsError(RuntimeError):
    """A bad row with `on_error="fail"`: the job stops, naming it."""


@dataclass
class JobReport:
    embedded: int = 0
    bad: int = 0
    resumed_from: int = 0
    seconds: float = 0.0
    output: str = ""
    errors_file: str | None = None
    embedding_space: str = ""


def output_kind(output: Path) -> OutputKind:
    """What the output's name asks for: .npy, .jsonl (.ndjson) or a Parquet dataset (a
    directory, named with .parquet or no extension); JobStateError for any other extension."""
    suffix = output.suffix.lower()
    if suffix == ".npy":
        return "npy"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix in ("", ".parquet"):
        return "parquet"
    raise JobStateError(
        f"cannot write {output.name}: name the output .npy, .jsonl or .parquet (a directory of "
        "Parquet parts; no extension also writes one)"
    )


def _store(output: Path, kind: OutputKind, options: JobOptions) -> PartStore:
    directory = output if kind == "parquet" else output.with_name(output.name + ".parts")
    return PartStore(directory, options.part_rows)


def check_job(spec: InputSpec, output: Path, options: JobOptions) -> None:
    """Everything about a job that needs no model, so that it fails before one loads: the
    input is there, the output's kind is one it can write, and the output does not hold a
    finished or a foreign job (JobStateError or InputError, one line each). Says when it will
    resume."""
    if spec.format == "images":
        if not Path(spec.path).is_dir():
            raise InputError(f"{spec.path}: no such folder")
    elif spec.path != "-" and not Path(spec.path).is_file():
        raise InputError(f"{spec.path}: no such file")
    check_columns(spec)
    _check_writable(output)
    kind = output_kind(output)
    if kind != "parquet" and output.exists() and not options.overwrite:
        raise JobStateError(f"{output} exists; pass --overwrite to embed again")
    done = _store(output, kind, options).check(overwrite=options.overwrite)
    if done:
        logger.info(
            "%s holds %d parts of this job; it resumes after them once the model is loaded",
            output,
            done,
        )


def _check_writable(output: Path) -> None:
    """Refuse an output whose folder cannot be made or written (JobStateError, one line)."""
    folder = output.parent.absolute()
    existing = next(path for path in (folder, *folder.parents) if path.exists())
    if not existing.is_dir():
        raise JobStateError(
            f"cannot write {output}: {existing} is a file, not a folder; name an output in a folder"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise JobStateError(f"cannot write {output}: {existing} is not writable here")


@dataclass
class _Part:
    index: int
    rows: list[Row]
    bad: list[BadRow]
    # The rows' order by text length, as sent to the engine.
    order: list[int]
    # The engine's calls over `order`, in turn (CALL_ROWS rows each).
    calls: list[Future[CountedEmbeddings]]


def run_job(
    engine: PartEmbedder,
    spec: InputSpec,
    output: Path,
    options: JobOptions,
    *,
    parts_in_flight: int = PARTS_IN_FLIGHT,
) -> JobReport:
    """Embed every record of `spec` into `output`, resuming a job killed before; at most
    `parts_in_flight` parts are read ahead of the one being written."""
    kind = output_kind(output)
    store = _store(output, kind, options)
    if kind != "parquet" and output.exists() and not options.overwrite:
        raise JobStateError(f"{output} exists; pass --overwrite to embed again")
    space = engine.embedding_space(normalize=options.normalize, dimensions=options.dimensions)
    first = store.open(_settings(engine, spec, options, space), overwrite=options.overwrite)
    report = JobReport(
        resumed_from=first * options.part_rows, output=str(output), embedding_space=space
    )
    started = time.perf_counter()
    records = read_records(spec)
    skipped = sum(1 for _ in itertools.islice(records, first * options.part_rows))
    if first:
        logger.info("resuming after %d records already embedded (%d parts)", skipped, first)
    total = count_records(spec)
    progress = Progress(total, done=skipped)
    try:
        in_flight: deque[_Part] = deque()
        for index in itertools.count(first):
            chunk = list(itertools.islice(records, options.part_rows))
            if not chunk:
                break
            in_flight.append(_start(engine, index, chunk, options, spec.images, progress))
            if len(in_flight) >= parts_in_flight:
                _finish(engine, store, in_flight.popleft(), spec, options, report, progress)
        while in_flight:
            _finish(engine, store, in_flight.popleft(), spec, options, report, progress)
    except BaseException:
        for part in in_flight:  # the engine drops what it has not started
            for call in part.calls:
                call.cancel()
        raise
    finally:
        progress.close()
    if kind != "parquet":
        assemble(store, output, kind)
        write_space(output, engine.name, space)
    store.finish()
    errors = output.with_name(output.name + ".errors.jsonl")
    report.bad = collect_errors(store, errors)
    report.errors_file = str(errors) if report.bad else None
    if kind != "parquet":
        shutil.rmtree(store.directory)
    report.seconds = time.perf_counter() - started
    return report


def _settings(
    engine: PartEmbedder, spec: InputSpec, options: JobOptions, space: str
) -> dict[str, Any]:
    """What a job is, for its job file: a rerun resumes it only if they are the same."""
    return {
        "input": _fingerprint(spec),
        "model": engine.name,
        # The model's weights and pooling too: a job resumes only into the same space.
        "embedding_space": space,
        # Neither changes a vector: a job resumes with another priority or overwrite.
        **{
            key: value
            for key, value in asdict(options).items()
            if key not in ("overwrite", "priority")
        },
    }


def _fingerprint(spec: InputSpec) -> dict[str, Any]:
    described: dict[str, Any] = {
        "path": spec.path if spec.path == "-" else str(Path(spec.path).resolve()),
        "format": spec.format,
        "text_field": spec.text_field,
        "image_field": spec.image_field,
        "id_field": spec.id_field,
        # Without --id-field a record's `id` field is its id; a job started when its number
        # was its id does not resume under this rule.
        "id_default": DEFAULT_ID_FIELD if spec.id_field is None else None,
    }
    if spec.path != "-":
        stat = Path(spec.path).stat()
        described.update(size=stat.st_size, modified_ns=stat.st_mtime_ns)
    return described


def _start(
    engine: PartEmbedder,
    index: int,
    chunk: list[Record],
    options: JobOptions,
    images: bool,
    progress: Progress,
) -> _Part:
    rows = [record for record in chunk if isinstance(record, Row)]
    bad = [record for record in chunk if isinstance(record, BadRow)]
    part = _Part(index, rows, bad, [], [])
    progress.advance(len(bad))  # read, and done with
    _submit(engine, part, options, images, progress)
    return part


def _submit(
    engine: PartEmbedder, part: _Part, options: JobOptions, images: bool, progress: Progress
) -> None:
    part.order = sorted(range(len(part.rows)), key=lambda i: len(part.rows[i].text))
    extra: dict[str, Any] = {"images": True} if images else {}
    for start in range(0, len(part.order), CALL_ROWS):
        run = part.order[start : start + CALL_ROWS]
        call = engine.embed_counted_later(
            [part.rows[i].text for i in run],
            normalize=options.normalize,
            dimensions=options.dimensions,
            truncate_prompt_tokens=-1 if options.truncate else None,
            skip_too_long=True,
            priority=options.priority,
            **extra,
        )
        call.add_done_callback(progress.on_done(len(run)))
        part.calls.append(call)


def _finish(
    engine: PartEmbedder,
    store: PartStore,
    part: _Part,
    spec: InputSpec,
    options: JobOptions,
    report: JobReport,
    progress: Progress,
) -> None:
    vectors, tokens = _results(engine, part, options)
    if part.bad and options.on_error == "fail":
        first = min(part.bad, key=lambda row: row.index)
        raise BadRowsError(
            f"{spec.unit} {first.position} (id {first.id!r}): {first.reason}; "
            "pass --on-error skip to report bad rows and go on"
        )
    ids = [row.id for row in part.rows]
    store.write(part.index, ids, vectors, tokens, part.bad, spec.unit, report.embedding_space)
    logger.debug("wrote part %d (%d records, %d bad)", part.index, len(part.rows), len(part.bad))
    report.embedded += len(part.rows)


def _results(
    engine: PartEmbedder, part: _Part, options: JobOptions
) -> tuple[np.ndarray, list[int]]:
    """The part's vectors and token counts, in input order; a text too long for the model
    becomes a bad row (left out by the engine, the others embedded once)."""
    if not part.calls:
        width = options.dimensions or engine.embedding_dim
        return np.zeros((0, width), np.float32), []
    counted = _joined([call.result() for call in part.calls])
    sent = part.order  # the rows' indices in the order the engine got them
    for index, detail in counted.too_long.items():
        row = part.rows[sent[index]]
        reason = f"the text {detail} (see --truncate)"
        part.bad.append(BadRow(row.index, row.position, row.id, reason))
    for index, detail in counted.unreadable.items():
        row = part.rows[sent[index]]
        part.bad.append(BadRow(row.index, row.position, row.id, detail))
    part.bad.sort(key=lambda bad: bad.index)
    left_out = counted.too_long.keys() | counted.unreadable.keys()
    embedded = [row for i, row in enumerate(sent) if i not in left_out]
    # Back to input order.
    restore = np.argsort(np.asarray(embedded, dtype=np.int64), kind="stable")
    part.rows = [part.rows[embedded[i]] for i in restore]
    return counted.vectors[restore], [counted.tokens[i] for i in restore]


def _joined(calls: Sequence[CountedEmbeddings]) -> CountedEmbeddings:
    """The results of consecutive calls as one call's (indices counted across them)."""
    from poolserve.tasks.counted_embed import CountedEmbeddings

    too_long: dict[int, str] = {}
    unreadable: dict[int, str] = {}
    at = 0
    for call in calls:
        sent = len(call.tokens) + len(call.too_long) + len(call.unreadable)
        too_long.update({at + index: detail for index, detail in call.too_long.items()})
        unreadable.update({at + index: detail for index, detail in call.unreadable.items()})
        at += sent
    return CountedEmbeddings(
        np.concatenate([call.vectors for call in calls]),
        [tokens for call in calls for tokens in call.tokens],
        too_long,
        unreadable,
    )


def summary_lines(report: JobReport) -> Iterator[str]:
    """The report as lines for the terminal."""
    yield (
        f"embedded {report.embedded} records into {report.output} in {report.seconds:.1f} s"
        + (f" (resumed after {report.resumed_from})" if report.resumed_from else "")
    )
    yield f"embedding space {report.embedding_space} (README: the embedding space)"
    if report.bad:
        yield f"{report.bad} bad records skipped, each with its place and reason in " + str(
            report.errors_file
        )
