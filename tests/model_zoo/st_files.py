"""sentence-transformers files: modules.json, sentence_bert_config.json,
config_sentence_transformers.json, 1_Pooling/config.json and Dense folders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from tests.model_zoo.constants import IDENTITY, ST_MODULES
from tests.tiny_models import _write_json


def st_versions(sentence_transformers: str, transformers: str, pytorch: str) -> dict[str, Any]:
    return {
        "__version__": {
            "sentence_transformers": sentence_transformers,
            "transformers": transformers,
            "pytorch": pytorch,
        }
    }


def write_st(
    directory: Path,
    modules: Sequence[tuple[str, str]],
    *,
    max_seq_length: int,
    do_lower_case: bool = False,
    st_config: Mapping[str, Any] | None = None,
) -> None:
    """modules.json (`(path, class)` pairs, classes under sentence_transformers.models),
    sentence_bert_config.json and config_sentence_transformers.json. Normalize modules get no
    folder: hub repositories cannot hold an empty one."""
    _write_json(
        directory / "modules.json",
        [
            {"idx": i, "name": str(i), "path": path, "type": ST_MODULES + kind}
            for i, (path, kind) in enumerate(modules)
        ],
    )
    _write_json(
        directory / "sentence_bert_config.json",
        {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case},
    )
    if st_config is not None:
        _write_json(directory / "config_sentence_transformers.json", dict(st_config))


def write_pooling(
    directory: Path, dimension: int, mode: str, *, legacy: bool = False, path: str = "1_Pooling"
) -> None:
    """1_Pooling/config.json. `legacy` is the five keys sentence-transformers 2.0 - 2.2 wrote;
    otherwise the eight keys of later versions (weightedmean, lasttoken, include_prompt)."""
    modes = ["cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens"]
    if not legacy:
        modes += ["weightedmean_tokens", "lasttoken"]
    wanted = {"cls": "cls_token", "mean": "mean_tokens", "lasttoken": "lasttoken"}[mode]
    config: dict[str, Any] = {"word_embedding_dimension": dimension}
    config.update({f"pooling_mode_{m}": m == wanted for m in modes})
    if not legacy:
        config["include_prompt"] = True
    _write_json(directory / path / "config.json", config)


def write_dense(
    directory: Path,
    path: str,
    in_features: int,
    out_features: int,
    *,
    bias: bool,
    file_name: str = "model.safetensors",
) -> None:
    """A sentence_transformers Dense folder: config.json (Identity activation) and its
    `linear.weight` (and `linear.bias`) in model.safetensors or, for older repositories, a
    torch.save'd pytorch_model.bin. Weights drawn from torch's current (seeded) generator."""
    from safetensors.torch import save_file

    linear = torch.nn.Linear(in_features, out_features, bias=bias)
    folder = directory / path
    _write_json(
        folder / "config.json",
        {
            "in_features": in_features,
            "out_features": out_features,
            "bias": bias,
            "activation_function": IDENTITY,
        },
    )
    state = {f"linear.{name}": t.detach().contiguous() for name, t in linear.state_dict().items()}
    if file_name == "model.safetensors":
        save_file(state, str(folder / file_name), metadata={"format": "pt"})
    else:
        torch.save(state, folder / file_name)
