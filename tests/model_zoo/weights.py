"""Weights and config.json: seeding, `save_pretrained` in the real checkpoint's dtype with
config.json rewritten in the transformers 4.x form hub repositories carry (and read back to check
it), and trust_remote_code checkpoints written from their shipped classes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from tests.tiny_models import SEED, _read_json, _write_json


def seed_torch(offset: int) -> None:
    """Seed torch's generator for the model numbered `offset` (each generator its own number)."""
    torch.manual_seed(SEED + 1000 + offset)


def rounded(size: int, multiple: int) -> int:
    """`size` rounded up to a multiple of `multiple` (vocabularies padded as checkpoints do)."""
    return -(-size // multiple) * multiple


def save_model(
    model: Any,
    directory: Path,
    *,
    dtype: torch.dtype,
    transformers_version: str,
    keep_dtype_key: bool = True,
    layer_type_rope: Mapping[str, str] | None = None,
    drop: Sequence[str] = (),
    **updates: Any,
) -> None:
    """`save_pretrained` in `dtype`, then config.json in the transformers 4.x form hub repositories
    carry: `torch_dtype` (or none, for repositories older than that key), rope_parameters back to
    `rope_theta` / `rope_scaling` (or, per layer type, to the keys `layer_type_rope` names),
    `transformers_version`, `updates`, keys sorted. `AutoConfig` then reads it back and must see
    the configuration the weights were made with."""
    directory.mkdir(parents=True, exist_ok=True)
    model.to(dtype).save_pretrained(str(directory))
    path = directory / "config.json"
    config = _read_json(path)
    stored_dtype = config.pop("dtype", None) or str(dtype).removeprefix("torch.")
    config.pop("torch_dtype", None)
    if keep_dtype_key:
        config["torch_dtype"] = stored_dtype
    rope = config.pop("rope_parameters", None)
    if rope is not None and "rope_theta" in rope:
        config["rope_theta"] = rope["rope_theta"]
        config["rope_scaling"] = None
    elif rope is not None:
        if layer_type_rope is None:
            raise ValueError(f"per-layer-type rope_parameters {rope} need layer_type_rope")
        for layer_type, key in layer_type_rope.items():
            config[key] = rope[layer_type]["rope_theta"]
    for key in drop:
        config.pop(key, None)
    config.update(updates, transformers_version=transformers_version)
    _write_json(path, dict(sorted(config.items())))
    _check_read_back(model, directory)


def _check_read_back(model: Any, directory: Path) -> None:
    """`AutoConfig` must read `directory`'s config.json back as the configuration `model`'s
    weights were made with (rope, layer types, window, causality, sizes, tying)."""
    from transformers import AutoConfig

    path = directory / "config.json"
    loaded = AutoConfig.from_pretrained(str(directory))
    for name in (
        "rope_parameters",
        "layer_types",
        "sliding_window",
        "is_causal",
        "use_bidirectional_attention",
        "head_dim",
        "hidden_size",
        "vocab_size",
        "tie_word_embeddings",
    ):
        if hasattr(model.config, name) and getattr(loaded, name, None) != getattr(
            model.config, name
        ):
            raise RuntimeError(
                f"{path}: {name} reads back as {getattr(loaded, name, None)!r}, the weights were "
                f"made with {getattr(model.config, name)!r}"
            )


def save_custom(
    directory: Path,
    *,
    code: Mapping[str, str],
    config: Mapping[str, Any],
    auto_class: str,
    seed: int,
    dtype: torch.dtype,
    prefix: str = "",
) -> None:
    """A trust_remote_code checkpoint: the code files, config.json as given, and model.safetensors
    from the shipped class itself (loaded with trust_remote_code, seeded), keys under `prefix`."""
    import transformers
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    for name, text in code.items():
        (directory / name).write_text(text, encoding="utf-8")
    _write_json(directory / "config.json", dict(sorted(config.items())))
    loaded = transformers.AutoConfig.from_pretrained(str(directory), trust_remote_code=True)
    seed_torch(seed)
    model = getattr(transformers, auto_class).from_config(loaded, trust_remote_code=True)
    state = {
        prefix + name: tensor.detach().to(dtype).contiguous()
        for name, tensor in model.state_dict().items()
    }
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
