"""sentence-transformers Dense modules (a linear layer and an activation), rebuilt from files."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from poolserve.errors import ModelLoadError
from poolserve.models.layout import DenseSpec

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
