"""The single-file outputs of `poolserve embed` (.npy with its ids, .jsonl), assembled from the
job's Parquet parts (parts.py) at its end, what goes beside them, and the job's bad records in
one file."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import orjson

from poolserve.bulk.parts import PartStore

OutputKind = Literal["parquet", "npy", "jsonl"]


def assemble(store: PartStore, output: Path, kind: OutputKind) -> None:
    """The single-file output from the parts, one part in memory at a time, written under a
    temporary name then renamed."""
    import pyarrow.parquet as pq

    temporary = output.with_name(output.name + ".tmp")
    parts = list(store.parts())
    if kind == "jsonl":
        with open(temporary, "wb") as file:
            for path in parts:
                for record in pq.read_table(path).to_pylist():
                    file.write(orjson.dumps(record) + b"\n")
        temporary.replace(output)
        return
    files = [pq.ParquetFile(path) for path in parts]
    rows = sum(file.metadata.num_rows for file in files)
    width = files[0].schema_arrow.field("embedding").type.list_size if files else 0
    matrix = np.lib.format.open_memmap(temporary, mode="w+", dtype=np.float32, shape=(rows, width))
    ids = output.with_name(output.stem + ".ids.jsonl")
    at = 0
    with open(ids, "wb") as id_file:
        for file in files:
            table = file.read()
            values = table.column("embedding").combine_chunks().flatten().to_numpy()
            matrix[at : at + table.num_rows] = values.reshape(table.num_rows, width)
            at += table.num_rows
            for value in table.column("id").to_pylist():
                id_file.write(orjson.dumps(value) + b"\n")
    matrix.flush()
    del matrix
    temporary.replace(output)


def write_space(output: Path, model: str, space: str) -> None:
    """Beside a .npy or .jsonl output (which have no room for it): which space its vectors are
    in (a Parquet output has it in each part's metadata)."""
    meta = output.with_name(output.name + ".meta.json")
    meta.write_bytes(orjson.dumps({"model": model, "embedding_space": space}))


def collect_errors(store: PartStore, errors: Path) -> int:
    lines = list(store.errors())
    if lines:
        errors.write_bytes(b"".join(line + b"\n" for line in lines))
    elif errors.exists():
        errors.unlink()
    return len(lines)
