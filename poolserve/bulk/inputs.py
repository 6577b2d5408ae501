"""Reading a corpus for `poolserve embed`: JSONL, CSV, Parquet or plain text, streamed.

Every record becomes a `Row` (its text) or a `BadRow` (why it cannot be embedded: a missing
field, a value that is not text, a blank text, a line that is not JSON), each numbered by its
place in the input (`position`: the line in a text file, the row in a Parquet file) so that a
report can point at it. Records are numbered 0, 1, 2... in input order (`index`), which is the
default id and what a resumed job counts to skip what it has done.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

Format = Literal["jsonl", "csv", "parquet", "text"]
FORMATS: tuple[Format, ...] = ("jsonl", "csv", "parquet", "text")
_EXTENSIONS: dict[str, Format] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".txt": "text",
}


class InputError(ValueError):
    """The input as a whole cannot be read as asked (a missing column, an unknown format)."""


@dataclass(frozen=True)
class Row:
    index: int
    position: int
    id: Any
    text: str


@dataclass(frozen=True)
class BadRow:
    index: int
    position: int
    id: Any
    reason: str


Record = Row | BadRow


@dataclass(frozen=True)
class InputSpec:
    path: str  # "-" is standard input
    format: Format
    text_field: str = "text"
    # None: the record's index.
    id_field: str | None = None

    @property
    def unit(self) -> str:
        """What `position` counts."""
        return "row" if self.format == "parquet" else "line"


def input_format(path: str, declared: str | None) -> Format:
    """The declared format, else the one the file's extension names."""
    if declared is not None:
        if declared not in FORMATS:
            raise InputError(f"--format must be one of {', '.join(FORMATS)}, got {declared!r}")
        return declared
    if path == "-":
        raise InputError("reading standard input needs --format (jsonl, csv or text)")
    suffix = Path(path).suffix.lower()
    if suffix not in _EXTENSIONS:
        raise InputError(
            f"cannot tell the format of {path} from its extension; pass --format "
            f"({', '.join(FORMATS)})"
        )
    return _EXTENSIONS[suffix]


def read_records(spec: InputSpec) -> Iterator[Record]:
    """Every record of the input, in order."""
    if spec.format == "parquet":
        if spec.path == "-":
            raise InputError("Parquet cannot be read from standard input; pass a file")
        yield from _parquet_records(spec)
        return
    stream = _open_text(spec.path)
    try:
        if spec.format == "jsonl":
            yield from _jsonl_records(spec, stream)
        elif spec.format == "csv":
            yield from _csv_records(spec, stream)
        else:
            yield from _text_records(stream)
    finally:
        if stream is not sys.stdin:
            stream.close()


def count_records(spec: InputSpec) -> int | None:
    """How many records the input holds, cheaply (for a progress bar's ETA); None if unknown."""
    if spec.path == "-":
        return None
    if spec.format == "parquet":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(spec.path).metadata.num_rows)
    if spec.format == "csv":
        return None  # quoted fields may span lines
    lines = 0
    with open(spec.path, "rb") as file:
        while block := file.read(1 << 20):
            lines += block.count(b"\n")
    return lines


def _open_text(path: str) -> io.TextIOBase:
    if path == "-":
        return sys.stdin  # type: ignore[return-value]
    try:
        return open(path, encoding="utf-8", newline="")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _judge(spec: InputSpec, index: int, position: int, record: Any) -> Record:
    """A Row, or a BadRow that says why; blank texts follow the server's one rule."""
    record_id = index if spec.id_field is None else record.get(spec.id_field)
    if spec.id_field is not None and record_id is None:
        return BadRow(index, position, index, f"no {spec.id_field!r} field")
    if spec.text_field not in record or record[spec.text_field] is None:
        return BadRow(index, position, record_id, f"no {spec.text_field!r} field")
    text = record[spec.text_field]
    if not isinstance(text, str):
        return BadRow(
            index, position, record_id, f"{spec.text_field!r} is a {type(text).__name__}, not text"
        )
    if not text.strip():
        return BadRow(index, position, record_id, f"{spec.text_field!r} is blank")
    return Row(index, position, record_id, text)


def _jsonl_records(spec: InputSpec, stream: io.TextIOBase) -> Iterator[Record]:
    index = 0
    for line_number, line in enumerate(stream, start=1):
        if not line.strip():
            continue  # a blank line is no record
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            yield BadRow(index, line_number, index, f"not JSON: {exc}")
        else:
            if isinstance(record, dict):
                yield _judge(spec, index, line_number, record)
            else:
                yield BadRow(index, line_number, index, "not a JSON object")
        index += 1


def _csv_records(spec: InputSpec, stream: io.TextIOBase) -> Iterator[Record]:
    reader = csv.DictReader(stream)
    columns = reader.fieldnames or []
    for needed in (spec.text_field, spec.id_field):
        if needed is not None and needed not in columns:
            raise InputError(
                f"{spec.path} has no column {needed!r} (its columns: {', '.join(columns)})"
            )
    for index, record in enumerate(reader):
        yield _judge(spec, index, reader.line_num, record)


def _text_records(stream: io.TextIOBase) -> Iterator[Record]:
    for index, line in enumerate(stream):
        text = line.rstrip("\r\n")
        if text.strip():
            yield Row(index, index + 1, index, text)
        else:
            yield BadRow(index, index + 1, index, "blank line")


def _parquet_records(spec: InputSpec) -> Iterator[Record]:
    import pyarrow.parquet as pq

    try:
        file = pq.ParquetFile(spec.path)
    except OSError as exc:
        raise InputError(f"cannot read {spec.path}: {exc}") from None
    columns = [spec.text_field] + ([spec.id_field] if spec.id_field else [])
    missing = [name for name in columns if name not in file.schema_arrow.names]
    if missing:
        raise InputError(
            f"{spec.path} has no column {missing[0]!r} (its columns: "
            f"{', '.join(file.schema_arrow.names)})"
        )
    index = 0
    for batch in file.iter_batches(batch_size=8192, columns=columns):
        for record in batch.to_pylist():
            yield _judge(spec, index, index + 1, record)
            index += 1
