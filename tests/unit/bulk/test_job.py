"""The bulk job's formats and rules, in process over the session engine: every input format gives
the same vectors as `Engine.embed`, every output format holds them in input order, and a job
refuses to mix with another or to overwrite a finished one."""

from __future__ import annotations

import csv
import io
import json
import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from poolserve import commands
from poolserve.bulk import job as job_module
from poolserve.bulk import job_progress as progress_module
from poolserve.bulk.corpus import InputError, InputSpec, input_format, read_records
from poolserve.bulk.job import BadRowsError, run_job
from poolserve.bulk.parts import JobStateError
from poolserve.config.job_config import JobOptions
from poolserve.errors import ModelLoadError
from poolserve.offline import model_engine as offline_engine
from tests.reference import FP32_COSINE, WORDS, assert_close_vectors

TEXTS = [" ".join(WORDS[i : i + 3 + i % 7]) for i in range(40)]


def write_input(directory: Path, kind: str) -> Path:
    if kind == "jsonl":
        path = directory / "in.jsonl"
        path.write_text(
            "".join(json.dumps({"text": t, "key": f"k{i}"}) + "\n" for i, t in enumerate(TEXTS))
        )
    elif kind == "csv":
        path = directory / "in.csv"
        with path.open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["key", "text"])
            writer.writerows([f"k{i}", t] for i, t in enumerate(TEXTS))
    elif kind == "parquet":
        path = directory / "in.parquet"
        pq.write_table(pa.table({"text": TEXTS, "key": [f"k{i}" for i in range(len(TEXTS))]}), path)
    else:
        path = directory / "in.txt"
        path.write_text("".join(t + "\n" for t in TEXTS))
    return path


def parquet_vectors(output: Path) -> tuple[list[Any], np.ndarray]:
    table = ds.dataset(output).to_table()
    ids = table.column("id").to_pylist()
    return ids, table.column("embedding").combine_chunks().flatten().to_numpy().reshape(
        len(ids), -1
    )


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet", "text"])
def test_every_input_format_gives_the_vectors_of_embed(
    engine: Any, tmp_path: Path, kind: str
) -> None:
    path = write_input(tmp_path, kind)
    id_field = None if kind == "text" else "key"
    spec = InputSpec(str(path), input_format(str(path), None), id_field=id_field)
    report = run_job(engine, spec, tmp_path / "out.parquet", JobOptions(part_rows=16))
    assert report.embedded == len(TEXTS) and report.bad == 0
    ids, vectors = parquet_vectors(tmp_path / "out.parquet")
    assert ids == (
        list(range(len(TEXTS))) if kind == "text" else [f"k{i}" for i in range(len(TEXTS))]
    )
    assert_close_vectors(vectors, engine.embed(TEXTS), FP32_COSINE)
    # Which space the vectors are in: each part's metadata, as the server's header says it.
    space = engine.embedding_space()
    assert report.embedding_space == space
    for part in sorted((tmp_path / "out.parquet").glob("part-*.parquet")):
        assert pq.read_schema(part).metadata[b"poolserve.embedding_space"] == space.encode()


def test_a_single_file_output_has_its_space_beside_it(engine: Any, tmp_path: Path) -> None:
    path = write_input(tmp_path, "text")
    spec = InputSpec(str(path), input_format(str(path), None))
    options = JobOptions(part_rows=16, dimensions=64)
    run_job(engine, spec, tmp_path / "out.npy", options)
    meta = json.loads((tmp_path / "out.npy.meta.json").read_text())
    assert meta == {"model": engine.name, "embedding_space": engine.embedding_space(dimensions=64)}
    assert np.load(tmp_path / "out.npy").shape == (len(TEXTS), 64)


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet"])
def test_a_records_id_field_is_its_id_without_id_field(
    engine: Any, tmp_path: Path, kind: str
) -> None:
    """`{"id": "doc-0", "text": ...}` keeps its ids (a record without one: its number)."""
    ids: list[Any] = [f"doc-{i}" for i in range(len(TEXTS))]
    if kind == "jsonl":
        path = tmp_path / "in.jsonl"
        records = [{"id": i, "text": t} for i, t in zip(ids, TEXTS, strict=True)]
        del records[3]["id"]  # no id: its number
        ids[3] = 3
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
    elif kind == "csv":
        path = tmp_path / "in.csv"
        with path.open("w", newline="") as file:
            csv.writer(file).writerows([["text", "id"], *zip(TEXTS, ids, strict=True)])
    else:
        path = tmp_path / "in.parquet"
        pq.write_table(pa.table({"id": ids, "text": TEXTS}), path)
    spec = InputSpec(str(path), input_format(str(path), None))
    run_job(engine, spec, tmp_path / "out.parquet", JobOptions(part_rows=16))
    got, vectors = parquet_vectors(tmp_path / "out.parquet")
    # One column holds one type: with a number among them, the ids are text.
    assert got == ([str(each) for each in ids] if kind == "jsonl" else ids)
    assert_close_vectors(vectors, engine.embed(TEXTS), FP32_COSINE)


def test_progress_counts_records_as_the_engines_calls_return(
    engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job under one part still moves: its records go in calls of CALL_ROWS, each counted
    when it returns, before the part is written; without a terminal a line says so every
    LOG_EVERY seconds."""
    counted: list[int] = []
    advance = progress_module.Progress.advance

    def record(progress: Any, count: int) -> None:
        counted.append(count)
        advance(progress, count)

    monkeypatch.setattr(job_module, "CALL_ROWS", 16)
    monkeypatch.setattr(progress_module.Progress, "advance", record)
    path = tmp_path / "in.jsonl"
    lines = [json.dumps({"text": t}) for t in TEXTS] + ['{"text": "  "}']
    path.write_text("".join(line + "\n" for line in lines))
    report = run_job(engine, InputSpec(str(path), "jsonl"), tmp_path / "out.parquet", JobOptions())
    assert (report.embedded, report.bad) == (len(TEXTS), 1)
    # The bad record when read, then each call of the one part (40 texts: 16 + 16 + 8).
    assert counted[0] == 1 and sorted(counted[1:]) == [8, 16, 16], counted

    # The periodic line, waited for by a handler that sees it (no sleep).
    monkeypatch.setattr(progress_module.Progress, "LOG_EVERY", 0.01)
    seen = threading.Event()

    class Watch(logging.Handler):
        def emit(self, log: logging.LogRecord) -> None:
            if "7 of 40 records" in log.getMessage():
                seen.set()

    watch = Watch()
    progress_module.logger.addHandler(watch)
    monkeypatch.setattr(progress_module.logger, "level", logging.INFO)
    try:
        progress = progress_module.Progress(40, done=0)
        progress.advance(7)
        assert seen.wait(30)
        progress.close()
    finally:
        progress_module.logger.removeHandler(watch)


def test_npy_and_jsonl_outputs_hold_the_same_rows(engine: Any, tmp_path: Path) -> None:
    spec = InputSpec(str(write_input(tmp_path, "text")), "text")
    run_job(engine, spec, tmp_path / "out.npy", JobOptions(part_rows=7, dimensions=32))
    matrix = np.load(tmp_path / "out.npy")
    assert matrix.shape == (len(TEXTS), 32)
    assert_close_vectors(matrix, engine.embed(TEXTS, dimensions=32), FP32_COSINE)
    ids = [json.loads(line) for line in (tmp_path / "out.ids.jsonl").open()]
    assert ids == list(range(len(TEXTS)))
    run_job(engine, spec, tmp_path / "out.jsonl", JobOptions(part_rows=7))
    records = [orjson.loads(line) for line in (tmp_path / "out.jsonl").open()]
    assert [r["id"] for r in records] == ids
    assert_close_vectors(np.array([r["embedding"] for r in records]), engine.embed(TEXTS))
    assert [r["tokens"] for r in records[:5]] == [len(engine.tokenize(t)) for t in TEXTS[:5]]
    assert not (tmp_path / "out.npy.parts").exists()


def test_standard_input_is_read_with_a_declared_format(
    engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InputError, match="needs --format"):
        input_format("-", None)
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(t + "\n" for t in TEXTS[:5])))
    run_job(engine, InputSpec("-", "text"), tmp_path / "out.parquet", JobOptions())
    ids, vectors = parquet_vectors(tmp_path / "out.parquet")
    assert ids == [0, 1, 2, 3, 4]
    assert_close_vectors(vectors, engine.embed(TEXTS[:5]))


def test_a_text_too_long_is_a_bad_row_unless_truncated(engine: Any, tmp_path: Path) -> None:
    long = " ".join(["bread"] * 400)
    path = tmp_path / "in.txt"
    path.write_text(f"{TEXTS[0]}\n{long}\n{TEXTS[1]}\n\n{TEXTS[2]}\n")
    spec = InputSpec(str(path), "text")
    report = run_job(engine, spec, tmp_path / "a.parquet", JobOptions())
    assert (report.embedded, report.bad) == (3, 2)
    errors = [json.loads(line) for line in (tmp_path / "a.parquet.errors.jsonl").open()]
    assert [(e["line"], e["reason"][:20]) for e in errors] == [
        (2, "the text has 402 tok"),
        (4, "blank line"),
    ]
    ids, _ = parquet_vectors(tmp_path / "a.parquet")
    assert ids == [0, 2, 4]
    truncated = run_job(engine, spec, tmp_path / "b.parquet", JobOptions(truncate=True))
    assert (truncated.embedded, truncated.bad) == (4, 1)
    with pytest.raises(BadRowsError, match=r"line 2 \(id 1\): the text has 402 tokens"):
        run_job(engine, spec, tmp_path / "c.parquet", JobOptions(on_error="fail"))


def test_texts_too_long_are_left_out_and_the_rest_of_their_part_embedded_once(
    engine: Any, tmp_path: Path
) -> None:
    """Sorted by length, a part's too-long texts come last, after every other text was
    tokenized and run: each is left out where it is found, never by sending the part again."""
    texts = [TEXTS[i % len(TEXTS)] for i in range(400)]
    long = [" ".join(["bread"] * (300 + k)) for k in range(4)]
    for k, text in enumerate(long):
        texts.insert(100 * k + 50, text)
    path = tmp_path / "in.txt"
    path.write_text("".join(text + "\n" for text in texts))
    before = engine.core.stats.snapshot().items
    report = run_job(engine, InputSpec(str(path), "text"), tmp_path / "out.parquet", JobOptions())
    # Each text once; each left out runs as a two-token placeholder.
    assert engine.core.stats.snapshot().items - before == len(texts)
    assert (report.embedded, report.bad) == (400, 4)
    errors = [json.loads(line) for line in (tmp_path / "out.parquet.errors.jsonl").open()]
    assert [e["line"] for e in errors] == [51, 151, 251, 351]
    assert errors[0]["reason"].startswith(
        "the text has 302 tokens, but the model accepts at most 256"
    )
    ids, vectors = parquet_vectors(tmp_path / "out.parquet")
    assert ids == [i for i, text in enumerate(texts) if text not in long]
    assert_close_vectors(vectors, engine.embed([t for t in texts if t not in long]), FP32_COSINE)


def test_a_missing_column_stops_the_job_before_any_work(tmp_path: Path) -> None:
    path = write_input(tmp_path, "csv")
    with pytest.raises(InputError, match="has no column 'body' \\(its columns: key, text\\)"):
        list(read_records(InputSpec(str(path), "csv", text_field="body")))


def test_an_output_is_never_mixed_with_another_job_or_overwritten(
    engine: Any, tmp_path: Path
) -> None:
    spec = InputSpec(str(write_input(tmp_path, "text")), "text")
    output = tmp_path / "out.parquet"
    run_job(engine, spec, output, JobOptions(part_rows=16))
    with pytest.raises(JobStateError, match="finished job; pass --overwrite"):
        run_job(engine, spec, output, JobOptions(part_rows=16))
    report = run_job(engine, spec, output, JobOptions(part_rows=16, dimensions=8, overwrite=True))
    assert parquet_vectors(output)[1].shape == (len(TEXTS), 8) and report.embedded == len(TEXTS)
    # An unfinished job resumes only as it was started.
    (output / "_poolserve_job.json").write_text(
        (output / "_poolserve_job.json")
        .read_text()
        .replace('"complete": true', '"complete": false')
    )
    # The dimensions change the vectors' space too.
    with pytest.raises(JobStateError, match=r"other settings \(dimensions, embedding_space differ"):
        run_job(engine, spec, output, JobOptions(part_rows=16, dimensions=16))
    # A job started before jobs recorded their space resumes (nothing to compare it to).
    job = json.loads((output / "_poolserve_job.json").read_text())
    del job["settings"]["embedding_space"]
    (output / "_poolserve_job.json").write_text(json.dumps(job))
    assert run_job(engine, spec, output, JobOptions(part_rows=16, dimensions=8)).embedded == 0
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("mine")
    with pytest.raises(JobStateError, match="not a poolserve embed job"):
        run_job(engine, spec, stranger, JobOptions())


def test_poolserve_embed_checks_its_job_before_loading_a_model(
    engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A missing input, an output it cannot write, a finished job: one line each, exit 1, and
    no model loaded for it (loading one fails this test)."""
    spec = InputSpec(str(write_input(tmp_path, "text")), "text")
    finished = tmp_path / "done.parquet"
    run_job(engine, spec, finished, JobOptions(part_rows=16))

    def no_model(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("loaded a model for a job that cannot run")

    monkeypatch.setattr(offline_engine, "Engine", no_model)
    table = write_input(tmp_path, "parquet")
    columns = write_input(tmp_path, "csv")
    cases = [
        ([str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "a.npy")], "no such file"),
        ([spec.path, "-o", f"{spec.path}/v.npy"], "in.txt is a file, not a folder"),
        ([str(table), "-o", str(tmp_path / "b.npy"), "--text-field", "body"], "no column 'body'"),
        ([str(columns), "-o", str(tmp_path / "c.npy"), "--id-field", "uid"], "no column 'uid'"),
        ([spec.path, "-o", str(tmp_path / "a.csv")], "cannot write a.csv: name the output"),
        ([spec.path, "-o", str(finished)], "holds a finished job; pass --overwrite"),
    ]
    for argv, message in cases:
        caplog.clear()
        assert commands.main(["embed", *argv]) == 1
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1 and message in errors[0], errors
    # A job that will resume says so before the model loads.
    job_file = finished / "_poolserve_job.json"
    job_file.write_text(job_file.read_text().replace('"complete": true', '"complete": false'))
    caplog.clear()
    with caplog.at_level(logging.INFO), pytest.raises(AssertionError, match="loaded a model"):
        commands.main(["embed", spec.path, "-o", str(finished), "--part-rows", "16"])
    assert any("resumes after them" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("flag", "mode"), [([], "cached"), (["--compile", "on"], "on")])
def test_a_bulk_job_never_waits_for_a_compile_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: list[str], mode: str
) -> None:
    """`embed`'s auto loads a compiled forward from the cache or runs eagerly; `on` compiles."""
    given: list[Any] = []

    def engine(*, model_config: Any, engine_config: Any) -> Any:
        given.append(engine_config)
        raise ModelLoadError("stopped before loading")

    monkeypatch.setattr(offline_engine, "Engine", engine)
    path = write_input(tmp_path, "text")
    assert commands.main(["embed", str(path), "-o", str(tmp_path / "out.parquet"), *flag]) == 1
    assert [config.compile for config in given] == [mode]
