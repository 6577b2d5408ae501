"""Where `poolserve embed` keeps its work: numbered Parquet parts that make a job resumable.

Part k holds the embeddings of input records [k·W, (k+1)·W) (W: the job's `part_rows`), in input
order, with the bad records of that range in `_errors-k.jsonl`. Each file is written atomically
(storage/atomic_files.py), errors first: a part that exists is whole, and so is its errors file.
Parts are written in order, so after a kill (even SIGKILL) the parts on disk are a prefix of the
job; a rerun deletes any temporary file, checks that the job file describes the same job, and starts
at the first missing part. Every record lands in exactly one part, or in exactly one errors file.

A Parquet output is this directory itself (a Parquet dataset: `pyarrow.dataset`, pandas, Spark
and DuckDB read it whole). An `.npy` or `.jsonl` output is assembled from it at the end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from poolserve.bulk.corpus import BadRow
from poolserve.storage.atomic_files import sync_and_rename, temporary, write_atomically

# Names starting with "_" or "." are not data to Parquet readers (pyarrow, pandas, Spark, DuckDB),
# so the directory reads as a dataset of its parts alone.
JOB_FILE = "_poolserve_job.json"
# The Parquet metadata key of the vectors' space (models/embedding_space.py), and the job
# setting that records it.
SPACE_KEY = "poolserve.embedding_space"
FINGERPRINTED = "embedding_space"


class JobStateError(ValueError):
    """The output holds another job, or a finished one, and --overwrite was not given."""


@dataclass(frozen=True)
class PartStore:
    directory: Path
    part_rows: int

    def part_path(self, index: int) -> Path:
        return self.directory / f"part-{index:06d}.parquet"

    def errors_path(self, index: int) -> Path:
        return self.directory / f"_errors-{index:06d}.jsonl"

    def check(self, *, overwrite: bool) -> int:
        """What `open` will find, read only (before a model loads): JobStateError for a
        finished job or a directory that is not a job; else the parts already written."""
        job_file = self.directory / JOB_FILE
        if overwrite:
            return 0
        if job_file.is_file():
            if json.loads(job_file.read_text()).get("complete"):
                raise JobStateError(
                    f"{self.directory} holds a finished job; pass --overwrite to embed again"
                )
            return self._parts_done()
        if self.directory.exists() and any(self.directory.iterdir()):
            raise JobStateError(
                f"{self.directory} exists and is not a poolserve embed job; choose another "
                "output or pass --overwrite"
            )
        return 0

    def _parts_done(self) -> int:
        done = 0
        while self.part_path(done).is_file():
            done += 1
        return done

    def open(self, settings: dict[str, Any], *, overwrite: bool) -> int:
        """Start or resume the job `settings` describe; returns the first part to write."""
        job_file = self.directory / JOB_FILE
        self.check(overwrite=overwrite)
        if job_file.is_file() and not overwrite:
            job = json.loads(job_file.read_text())
            if FINGERPRINTED not in job.get("settings", {}):
                # Started before jobs recorded their vectors' space: nothing to compare it to.
                job["settings"] = {
                    **job.get("settings", {}),
                    FINGERPRINTED: settings.get(FINGERPRINTED),
                }
            if job.get("settings") != settings:
                changed = sorted(
                    key
                    for key in {*settings, *job.get("settings", {})}
                    if settings.get(key) != job.get("settings", {}).get(key)
                )
                raise JobStateError(
                    f"{self.directory} holds a job started with other settings "
                    f"({', '.join(changed)} differ); rerun it as it was started, or pass "
                    "--overwrite to start again"
                )
        elif self.directory.exists() and overwrite:
            self.clear()
        self.directory.mkdir(parents=True, exist_ok=True)
        for leftover in self.directory.glob(".*.tmp"):
            leftover.unlink()
        write_atomically(job_file, json.dumps({"settings": settings, "complete": False}).encode())
        # A part's errors file is written before the part: one without its part is rewritten.
        return self._parts_done()

    def clear(self) -> None:
        for item in self.directory.iterdir():
            ours = item.name == JOB_FILE or item.name.startswith(("part-", "_errors-", "."))
            if item.is_file() and ours:
                item.unlink()
            else:
                raise JobStateError(
                    f"{self.directory} holds {item.name}, which a poolserve embed job never "
                    "writes; choose another output"
                )

    def write(
        self,
        index: int,
        ids: Sequence[Any],
        vectors: np.ndarray,
        tokens: Sequence[int],
        bad: Sequence[BadRow],
        unit: str,
        space: str,
    ) -> None:
        """Part `index`: its rows' ids, vectors and token counts, with the fingerprint of the
        vectors' space in the Parquet metadata (`poolserve.embedding_space`), and its bad rows."""
        lines = [
            orjson.dumps({"id": row.id, unit: row.position, "reason": row.reason}) for row in bad
        ]
        write_atomically(self.errors_path(index), b"".join(line + b"\n" for line in lines))
        table = pa.table(
            {
                "id": _id_array(ids),
                "embedding": pa.FixedSizeListArray.from_arrays(
                    pa.array(vectors.astype(np.float32, copy=False).ravel()), vectors.shape[1]
                )
                if len(ids)
                else pa.array([], pa.list_(pa.float32(), vectors.shape[1])),
                "tokens": pa.array(tokens, pa.int32()),
            }
        ).replace_schema_metadata({SPACE_KEY: space})
        written = temporary(self.part_path(index))
        pq.write_table(table, written)
        sync_and_rename(written, self.part_path(index))

    def finish(self) -> None:
        job_file = self.directory / JOB_FILE
        job = json.loads(job_file.read_text())
        job["complete"] = True
        write_atomically(job_file, json.dumps(job).encode())

    def parts(self) -> Iterator[Path]:
        index = 0
        while self.part_path(index).is_file():
            yield self.part_path(index)
            index += 1

    def errors(self) -> Iterator[bytes]:
        index = 0
        while self.errors_path(index).is_file():
            yield from self.errors_path(index).read_bytes().splitlines()
            index += 1


def _id_array(ids: Sequence[Any]) -> pa.Array:
    """Integer ids as int64, anything else as text (one column has one type)."""
    if all(isinstance(value, int) and not isinstance(value, bool) for value in ids):
        return pa.array(ids, pa.int64())
    return pa.array([value if isinstance(value, str) else json.dumps(value) for value in ids])
