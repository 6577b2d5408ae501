"""Linear layers stored beside the encoder, rebuilt from their files: sentence-transformers Dense
modules (a linear layer and an activation), Stanford ColBERT's projection, BGE-M3's heads."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from poolserve.backends.torch_model.module import M3Heads
from poolserve.errors import ModelLoadError
from poolserve.models.layout import M3_HEAD_FILES, DenseSpec

# Activations by the class path sentence-transformers stores; only these are trusted.
_ACTIVATIONS: dict[str, type[torch.nn.Module]] = {
    "Identity": torch.nn.Identity,
    "Tanh": torch.nn.Tanh,
    "ReLU": torch.nn.ReLU,
    "GELU": torch.nn.GELU,
    "Sigmoid": torch.nn.Sigmoid,
    "SiLU": torch.nn.SiLU,
}


def load_linear_head(directory: Path) -> torch.nn.Linear:
    """Stanford ColBERT's projection: `linear.weight` stored beside the encoder's weights."""
    weights_file = directory / "model.safetensors"
    if not weights_file.is_file():
        raise ModelLoadError(f"{directory}: a ColBERT model needs model.safetensors")
    with safe_open(str(weights_file), framework="pt") as weights:
        if "linear.weight" not in weights.keys():  # noqa: SIM118 (safe_open is not a dict)
            raise ModelLoadError(
                f"{directory}: no Dense module and no `linear.weight`: not a ColBERT model "
                "this server knows how to load"
            )
        weight = weights.get_tensor("linear.weight").float()
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        linear.weight.copy_(weight)
    return linear


def build_dense(spec: DenseSpec) -> torch.nn.Sequential:
    """The Dense module as `Sequential(Linear, activation)`, weights loaded from its directory."""
    activation_name = spec.activation.rsplit(".", 1)[-1]
    activation = _ACTIVATIONS.get(activation_name)
    if activation is None:
        raise ModelLoadError(
            f"{spec.directory}: activation {spec.activation!r} is not supported "
            f"(supported: {', '.join(_ACTIVATIONS)})"
        )
    linear = torch.nn.Linear(spec.in_features, spec.out_features, bias=spec.bias)
    weights_file = spec.directory / "model.safetensors"
    if weights_file.is_file():
        state = load_file(str(weights_file))
    elif (spec.directory / "pytorch_model.bin").is_file():
        state = torch.load(spec.directory / "pytorch_model.bin", weights_only=True)
    else:
        raise ModelLoadError(f"{spec.directory} has no model.safetensors")
    state = {key.removeprefix("linear."): value for key, value in state.items()}
    try:
        linear.load_state_dict(state)
    except RuntimeError as exc:
        raise ModelLoadError(
            f"{spec.directory}: weights do not fit the Dense layer: {exc}"
        ) from exc
    return torch.nn.Sequential(linear, activation())


def _linear_from_state(path: Path) -> torch.nn.Linear:
    """A Linear layer from a torch state dict file (`weight`, optional `bias`), loaded without
    unpickling anything but tensors."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ModelLoadError(f"{path}: cannot read it as a torch state dict: {exc}") from exc
    weight = state.get("weight") if isinstance(state, dict) else None
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ModelLoadError(f"{path}: no 2-D `weight` in it; not a linear layer")
    bias = state.get("bias")
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        linear.weight.copy_(weight.float())
        if bias is not None:
            linear.bias.copy_(bias.float())
    return linear


def load_m3_heads(directory: Path, special_ids: tuple[int, ...]) -> M3Heads:
    """BGE-M3's colbert_linear.pt and sparse_linear.pt, as FlagEmbedding saves them."""
    colbert_file, sparse_file = (directory / name for name in M3_HEAD_FILES)
    sparse = _linear_from_state(sparse_file)
    if sparse.out_features != 1:
        raise ModelLoadError(
            f"{sparse_file}: a weight per token needs 1 output, not {sparse.out_features}"
        )
    colbert = _linear_from_state(colbert_file)
    if colbert.out_features != colbert.in_features:
        # The combined head puts the dense vector where [CLS]'s ColBERT vector would be.
        raise ModelLoadError(
            f"{colbert_file}: ColBERT vectors of {colbert.out_features} dimensions from "
            f"{colbert.in_features}; BGE-M3's keep the hidden size, and only that is supported"
        )
    return M3Heads(sparse, colbert, special_ids)
