"""`poolserve embed` as a user runs it: an 8,000-document corpus in 20 parts, killed with
SIGKILL twice and rerun, ends with every document exactly once and the vectors `Engine.embed`
gives; bad rows are reported by line; a finished output is not overwritten."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.dataset as ds
import pytest

from tests.e2e.conftest import server_env
from tests.reference import FP32_COSINE, WORDS, assert_close_vectors

pytestmark = pytest.mark.slow

DOCUMENTS = 8_000
PART_ROWS = 400
# Lines (1-based) that are not embeddable, and why.
BAD_LINES = {
    101: (b'{"text": ', "not JSON"),
    2_502: (b'{"title": "no text here"}', "no 'text' field"),
    5_003: (b'{"text": 42}', "'text' is a int, not text"),
    7_004: (b'{"text": "  \\t "}', "'text' is blank"),
}


def document(index: int) -> str:
    return " ".join(WORDS[(index * 13 + j) % len(WORDS)] for j in range(4 + index % 23))


def write_corpus(path: Path) -> None:
    with path.open("wb") as file:
        for index in range(DOCUMENTS):
            bad = BAD_LINES.get(index + 1)
            file.write((bad[0] if bad else orjson.dumps({"text": document(index)})) + b"\n")


def embed_command(corpus: Path, output: Path, *extra: str) -> list[str]:
    return [
        *(sys.executable, "-m", "poolserve", "embed", str(corpus), "--output", str(output)),
        *("--dtype", "float32", "--compile", "off", "--backend", "torch"),
        *("--part-rows", str(PART_ROWS)),
        *("--log-level", "debug", *extra),
    ]


def kill_after_part(command: list[str], part: int) -> str:
    """Run the job and SIGKILL it once it has written `part` (read from its log as it goes)."""
    process = subprocess.Popen(
        command, env=server_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert process.stdout is not None
    seen: list[str] = []
    for raw in process.stdout:
        seen.append(raw.decode(errors="replace"))
        if f"wrote part {part} " in seen[-1]:
            process.send_signal(signal.SIGKILL)
            break
    process.wait(60)
    assert process.returncode == -signal.SIGKILL, "".join(seen[-20:])
    return "".join(seen)


def test_a_job_killed_twice_ends_with_every_document_once(tmp_path: Path, engine: Any) -> None:
    corpus, output = tmp_path / "corpus.jsonl", tmp_path / "vectors.parquet"
    write_corpus(corpus)
    command = embed_command(corpus, output)

    kill_after_part(command, 3)
    second = kill_after_part(command, 9)
    assert "resuming after 1600 records" in second, second[-2000:]
    finished = subprocess.run(command, env=server_env(), capture_output=True, text=True)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "resumed after" in finished.stdout

    table = ds.dataset(output).to_table()
    ids = table.column("id").to_pylist()
    good = [index for index in range(DOCUMENTS) if index + 1 not in BAD_LINES]
    assert ids == good  # each document exactly once, in input order
    vectors = table.column("embedding").combine_chunks().flatten().to_numpy().reshape(len(ids), -1)
    texts = [document(index) for index in good]
    sample = np.random.default_rng(3).choice(len(ids), 2000, replace=False)
    assert_close_vectors(vectors[sample], engine.embed([texts[i] for i in sample]), FP32_COSINE)
    tokens = table.column("tokens").to_pylist()
    assert [tokens[i] for i in sample[:50]] == [len(engine.tokenize(texts[i])) for i in sample[:50]]

    errors = [orjson.loads(line) for line in (tmp_path / "vectors.parquet.errors.jsonl").open()]
    assert sorted(error["line"] for error in errors) == sorted(BAD_LINES)
    for error in errors:
        assert error["reason"].startswith(BAD_LINES[error["line"]][1]), error

    again = subprocess.run(command, env=server_env(), capture_output=True, text=True)
    assert again.returncode == 1
    assert "holds a finished job; pass --overwrite" in again.stderr
