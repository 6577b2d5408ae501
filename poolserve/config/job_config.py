"""`poolserve embed`'s settings: the corpus and where its embeddings go (`JobInput`), and how the
job runs (`JobOptions`: its parts, bad rows, long texts and vectors). bulk/ runs the job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from poolserve.config.fields import setting
from poolserve.config.priorities import HIGHEST_PRIORITY, LOWEST_PRIORITY

InputFormat = Literal["jsonl", "csv", "parquet", "text"]
OnError = Literal["skip", "fail"]


@dataclass(frozen=True)
class JobInput:
    input: str = setting(
        positional=True,
        help="the corpus file, - for standard input, or a folder of images (an image-text "
        "model: each image file under it, its id its path there)",
    )
    output: str = setting(aliases=("-o",), help="where the embeddings go")
    format: InputFormat | None = setting(
        None, help="the input's format (default: from its extension)"
    )
    text_field: str = setting("text", help="the field or column of the text")
    image_field: str | None = setting(
        None,
        help="embed images (an image-text model): the field or column of each image's path, "
        "relative to the input file's folder (a folder as the input: its image files)",
    )
    id_field: str | None = setting(
        None,
        help="the field or column of the id (default: `id` where a record has one, else its "
        "number: 0, 1, ...)",
    )


@dataclass(frozen=True)
class JobOptions:
    part_rows: int = setting(
        8192, minimum=1, help="records per part file: what a killed job redoes at most"
    )
    on_error: OnError = setting(
        "skip",
        help="a bad record: skip (reported in OUTPUT.errors.jsonl, the job goes on) or fail (the "
        "job stops at the first one, naming it)",
    )
    truncate: bool = setting(
        False, help="cut texts longer than the model takes instead of reporting them as bad"
    )
    normalize: bool | None = setting(
        None,
        help="--no-normalize keeps the vectors as the model's pooling makes them (default: as "
        "the model says)",
    )
    dimensions: int | None = setting(None, minimum=1, help="keep the first N dimensions")
    overwrite: bool = setting(False, help="start again over an existing output")
    # Its range: config/priorities.py; its lanes: engine/lanes.py.
    priority: int = setting(
        LOWEST_PRIORITY,
        minimum=HIGHEST_PRIORITY,
        maximum=LOWEST_PRIORITY,
        help="the job's requests' priority, -10 (first) to 10 (last; the default): a job on an "
        "engine that also serves other requests yields to them",
    )
