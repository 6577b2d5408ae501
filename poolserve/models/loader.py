"""Loading a pooling model: directory → layout → tokenizer and torch module on the chosen device."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from poolserve.config import ModelConfig
from poolserve.errors import ModelLoadError
from poolserve.models.dense import build_dense
from poolserve.models.device import choose_device, choose_dtype
from poolserve.models.layout import ModelLayout, read_layout
from poolserve.models.pooling import pool
from poolserve.models.resolve import DEFAULT_MODEL_ID, resolve_model_dir

logger = logging.getLogger(__name__)


class EmbeddingModule(torch.nn.Module):
    """Transformer + pooling + Dense layers: token ids in, one float32 vector per sequence out.

    Normalization is left to post-processing, where each request says whether it wants it.
    """

    def __init__(
        self, transformer: torch.nn.Module, modes: tuple[str, ...], dense: Sequence[torch.nn.Module]
    ) -> None:
        super().__init__()
        self.transformer = transformer
        self.modes = modes
        self.dense = torch.nn.Sequential(*dense)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        hidden = self.transformer(**kwargs).last_hidden_state
        pooled = pool(hidden, attention_mask, self.modes)
        return self.dense(pooled).float()  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ModelSpec:
    """Everything known about a model before its weights are loaded: no torch work is done here.

    The weights are loaded by `load_module` on the thread that will run the model: torch's OpenMP
    thread team belongs to the thread that first runs an operator, and a second team (say the
    main thread's, from loading) makes every operator of the runner thread about twice as slow.
    """

    name: str
    layout: ModelLayout
    tokenizer_json: str
    device: torch.device
    dtype: torch.dtype

    @property
    def max_model_len(self) -> int:
        return self.layout.max_model_len

    @property
    def embedding_dim(self) -> int:
        return self.layout.embedding_dim

    @property
    def pad_token_id(self) -> int:
        return int(self.layout.hf_config.get("pad_token_id") or 0)


def _model_name(config: ModelConfig, directory: Path) -> str:
    if config.model is None:
        return DEFAULT_MODEL_ID
    if Path(config.model).expanduser().is_dir():
        return directory.name
    return config.model


def load_tokenizer_json(directory: Path) -> str:
    """The fast tokenizer's definition; converted by transformers when only vocab files exist."""
    tokenizer_file = directory / "tokenizer.json"
    if tokenizer_file.is_file():
        return tokenizer_file.read_text(encoding="utf-8")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), use_fast=True)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"{directory}: no tokenizer.json and no convertible tokenizer"
        ) from exc
    json_text: str = tokenizer.backend_tokenizer.to_str()
    return json_text


def prepare_model(config: ModelConfig) -> ModelSpec:
    """Resolve the model, read its layout and tokenizer; raises ModelLoadError with the reason."""
    directory = resolve_model_dir(config.model, config.revision)
    layout = read_layout(directory, config.max_model_len)
    device = choose_device(config.device)
    dtype = choose_dtype(config.dtype, device)
    tokenizer_json = load_tokenizer_json(directory)
    try:
        Tokenizer.from_str(tokenizer_json)  # fail at start-up, not on the first request
    except Exception as exc:
        raise ModelLoadError(f"{directory}: the tokenizer cannot be loaded: {exc}") from exc
    return ModelSpec(
        name=_model_name(config, directory),
        layout=layout,
        tokenizer_json=tokenizer_json,
        device=device,
        dtype=dtype,
    )


def load_module(spec: ModelSpec) -> EmbeddingModule:
    """Load the weights and build the module on the spec's device (call on the runner thread)."""
    from transformers import AutoModel

    layout = spec.layout
    try:
        transformer = AutoModel.from_pretrained(
            str(layout.directory), dtype=spec.dtype, attn_implementation="sdpa"
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load the transformer from {layout.directory}: {exc}") from exc
    dense = [build_dense(dense_spec) for dense_spec in layout.dense]
    module = EmbeddingModule(transformer, layout.pooling_modes, dense).to(spec.device).eval()
    logger.info(
        "loaded %s (%s, %s on %s, max_model_len %d, dim %d)",
        layout.directory,
        layout.architecture,
        spec.dtype,
        spec.device,
        layout.max_model_len,
        layout.embedding_dim,
    )
    return module
