"""Reading a corpus for `poolserve embed`: JSONL, CSV, Parquet or plain text, streamed; or
images: a folder of image files, or a field of image paths (`--image-field`).

Every record becomes a `Row` (its text, or its image's path) or a `BadRow` (why it cannot be
embedded: a missing field, a value that is not text, a blank text, a line that is not JSON), each
numbered by its place in the input (`position`: the line in a text file, the row in a Parquet file,
the file in a folder) so that a report can point at it. Records are numbered 0, 1, 2... in input
order (`index`), which is what a resumed job counts to skip what it has done, and the id of a record
with no `id` field (or `--id-field`). A folder's files are read in the order of their paths, each
one's id its path under the folder; an image path in a field is read relative to the input file's
folder.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from poolserve.config.job_config import InputFormat, JobInput

# What `--format` names, and a folder of images.
Format = Literal[InputFormat, "images"]
FORMATS: tuple[Format, ...] = ("jsonl", "csv", "parquet", "text", "images")
# The files of a folder of images that are embedded (any other file is left alone).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff")
_EXTENSIONS: dict[str, Format] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".txt": "text",
}


# The field a record's id is read from where `--id-field` names none (its number without it).
DEFAULT_ID_FIELD = "id"


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
    # The field of image paths (an image-text model embeds the images); None: texts.
    image_field: str | None = None

    @classmethod
    def of(cls, job: JobInput) -> InputSpec:
        """The input `embed`'s flags name, its format told by its extension where not given."""
        format = input_format(job.input, job.format)
        return cls(job.input, format, job.text_field, job.id_field, job.image_field)

    @property
    def unit(self) -> str:
        """What `position` counts."""
        return {"parquet": "row", "images": "file"}.get(self.format, "line")

    @property
    def images(self) -> bool:
        """Whether its rows name images (a folder of them, or `image_field`)."""
        return self.format == "images" or self.image_field is not None

    @property
    def field(self) -> str:
        """The field its rows are read from."""
        return self.image_field or self.text_field


def input_format(path: str, declared: str | None) -> Format:
    """The declared format, else the one the file's extension names."""
    if declared is not None:
        if declared not in FORMATS:
            raise InputError(f"--format must be one of {', '.join(FORMATS)}, got {declared!r}")
        return declared
    if path == "-":
        raise InputError("reading standard input needs --format (jsonl, csv or text)")
    if Path(path).is_dir():
        return "images"
    suffix = Path(path).suffix.lower()
    if suffix not in _EXTENSIONS:
        raise InputError(
            f"cannot tell the format of {path} from its extension; pass --format "
            f"({', '.join(FORMATS)})"
        )
    return _EXTENSIONS[suffix]


def read_records(spec: InputSpec) -> Iterator[Record]:
    """Every record of the input, in order."""
    if spec.format == "images":
        yield from _folder_records(spec)
        return
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
    if spec.format == "images":
        return len(image_files(Path(spec.path)))
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


def _record_id(spec: InputSpec, index: int, record: Any) -> Any:
    """The record's `--id-field`, or without one its `id` field where it has one, else its
    number."""
    if spec.id_field is not None:
        return record.get(spec.id_field)
    value = record.get(DEFAULT_ID_FIELD)
    return index if value is None or value == "" else value


def _judge(spec: InputSpec, index: int, position: int, record: Any) -> Record:
    """A Row, or a BadRow that says why; blank texts follow the server's one rule."""
    record_id = _record_id(spec, index, record)
    field = spec.field
    if spec.id_field is not None and record_id is None:
        return BadRow(index, position, index, f"no {spec.id_field!r} field")
    if field not in record or record[field] is None:
        return BadRow(index, position, record_id, f"no {field!r} field")
    text = record[field]
    if not isinstance(text, str):
        return BadRow(index, position, record_id, f"{field!r} is a {type(text).__name__}, not text")
    if not text.strip():
        return BadRow(index, position, record_id, f"{field!r} is blank")
    if spec.image_field is not None and spec.path != "-":
        text = str(Path(spec.path).parent / text)  # relative to the input file's folder
    return Row(index, position, record_id, text)


def image_files(folder: Path) -> list[Path]:
    """The image files under `folder` (its subfolders too), in the order of their paths."""
    return sorted(
        path
        for path in folder.rglob("*")
        if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file()
    )


def _folder_records(spec: InputSpec) -> Iterator[Record]:
    folder = Path(spec.path)
    if spec.id_field is not None:
        raise InputError("a folder of images has no fields: its ids are the files' paths")
    for index, path in enumerate(image_files(folder)):
        yield Row(index, index + 1, path.relative_to(folder).as_posix(), str(path))


def _jsonl_records(spec: InputSpec, stream: io.TextIOBase) -> Iterator[Record]:
    index = 0
    for line_number, line in enumerate(stream, start=1):
        if not line.strip():
            continue  # a blank line is no record
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            where = f"column {exc.colno}" if exc.colno else "the start"
            yield BadRow(index, line_number, index, f"not JSON ({exc.msg.lower()} at {where})")
        else:
            if isinstance(record, dict):
                yield _judge(spec, index, line_number, record)
            else:
                yield BadRow(index, line_number, index, "not a JSON object")
        index += 1


def check_columns(spec: InputSpec) -> None:
    """Refuse a CSV or Parquet file without the columns the job reads (InputError, one line),
    from its header or schema alone; other inputs are judged record by record."""
    if spec.path == "-" or spec.format not in ("csv", "parquet"):
        return
    if spec.format == "parquet":
        _parquet_file(spec)
        return
    stream = _open_text(spec.path)
    try:
        _check_csv_header(spec, csv.DictReader(stream).fieldnames or [])
    finally:
        stream.close()


def _check_csv_header(spec: InputSpec, columns: Sequence[str]) -> None:
    for needed in (spec.field, spec.id_field):
        if needed is not None and needed not in columns:
            raise InputError(
                f"{spec.path} has no column {needed!r} (its columns: {', '.join(columns)})"
            )


def _csv_records(spec: InputSpec, stream: io.TextIOBase) -> Iterator[Record]:
    reader = csv.DictReader(stream)
    _check_csv_header(spec, reader.fieldnames or [])
    for index, record in enumerate(reader):
        yield _judge(spec, index, reader.line_num, record)


def _text_records(stream: io.TextIOBase) -> Iterator[Record]:
    for index, line in enumerate(stream):
        text = line.rstrip("\r\n")
        if text.strip():
            yield Row(index, index + 1, index, text)
        else:
            yield BadRow(index, index + 1, index, "blank line")


def _parquet_file(spec: InputSpec) -> tuple[Any, list[str]]:
    """The Parquet file and the columns the job reads of it (InputError where one is missing)."""
    import pyarrow.parquet as pq

    try:
        file = pq.ParquetFile(spec.path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise InputError(f"cannot read {spec.path} as Parquet: {exc}") from None
    names = file.schema_arrow.names
    id_column = spec.id_field or (DEFAULT_ID_FIELD if DEFAULT_ID_FIELD in names else None)
    columns = [spec.field] + ([id_column] if id_column and id_column != spec.field else [])
    missing = [name for name in columns if name not in names]
    if missing:
        raise InputError(
            f"{spec.path} has no column {missing[0]!r} (its columns: {', '.join(names)})"
        )
    return file, columns


def _parquet_records(spec: InputSpec) -> Iterator[Record]:
    file, columns = _parquet_file(spec)
    index = 0
    for batch in file.iter_batches(batch_size=8192, columns=columns):
        for record in batch.to_pylist():
            yield _judge(spec, index, index + 1, record)
            index += 1
