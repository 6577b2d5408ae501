"""The measured choice of `--backend auto`, kept for the next start
(`POOLSERVE_CACHE_DIR/runtime-choice/<key>.json`). The key holds everything the measurement
depends on: the CPU (model name and instruction set), the model's files, kind, head and
attention, the candidates and the settings that shape each one's speed (the runners the trials
run at once and their threads, packing, int8 and its gate), the text it is timed on, and the
versions of every runtime installed (a runtime installed or upgraded since is measured anew). An
entry is written whole and renamed into place; one that cannot be read is measured again."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from dataclasses import asdict
from pathlib import Path

from poolserve.backends.choice.candidates import Candidates
from poolserve.backends.probe import calibration_texts, probe_texts
from poolserve.backends.torch_model.forward_cache import keyed_file, measured_on, write_json
from poolserve.config import EngineConfig
from poolserve.config.runtime_table import RUNTIMES
from poolserve.engine.model_backend import RuntimeChoice, RuntimeTrial
from poolserve.engine.runner_layout import runner_layout
from poolserve.models.spec import ModelSpec

# Bumped when what an entry holds, or how it is measured, changes (3: every runner at once;
# 4: a trial's `runtime`, which was its `engine`).
FORMAT = 4
# Libraries whose versions change what a runtime runs (beside the runtimes themselves).
_LIBRARIES = ("transformers", "onnx", "onnxscript", "nncf")


def choice_file(root: Path, spec: ModelSpec, config: EngineConfig, found: Candidates) -> Path:
    """Where the choice for this model, machine, candidates and settings is kept."""
    runners, threads = runner_layout(config, spec.device)  # what the trials run at once
    parts = {
        "format": FORMAT,
        **measured_on(spec),
        "max_model_len": spec.max_model_len,
        "candidates": [candidate.label for candidate in found.tried],
        "threads": threads,
        "runners": runners,
        "packing": config.packing,
        "compile": config.compile,
        "max_batch_size": config.max_batch_size,
        "single_thread_tokens": config.single_thread_tokens,
        "quantize_gate": config.quantize_gate,
        "texts": hashlib.sha256(
            "\n".join(probe_texts() + calibration_texts()).encode()
        ).hexdigest(),
        "versions": _versions(),
    }
    return keyed_file(root, "runtime-choice", parts)


def _versions() -> dict[str, str | None]:
    names = (*(entry.package for entry in RUNTIMES), *_LIBRARIES)
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cached_choice(path: Path) -> RuntimeChoice | None:
    """The choice an earlier start measured (None: none, or unreadable: measure)."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        trials = tuple(
            RuntimeTrial(
                runtime=str(row["runtime"]),
                precision=str(row["precision"]),
                sentences_per_second=_number(row["sentences_per_second"]),
                single_ms=_number(row["single_ms"]),
                figures={str(k): float(v) for k, v in row["figures"].items()},
                error=_number(row["error"]),
                outcome=str(row["outcome"]),
            )
            for row in entry["trials"]
        )
        return RuntimeChoice(
            str(entry["runtime"]),
            str(entry["precision"]),
            trials,
            "cached",
            float(entry["seconds"]),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _number(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def save_choice(path: Path, choice: RuntimeChoice) -> None:
    """Keep the choice for the next start (written whole, then renamed into place)."""
    write_json(path, asdict(choice))
