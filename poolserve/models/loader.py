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
class LoadedModel:
    """A model ready to run: its layout, tokenizer definition, module, device and dtype."""

    name: str
    layout: ModelLayout
    tokenizer_json: str
    module: EmbeddingModule
    device: torch.device
    dtype: torch.dtype

    @property
    def max_model_len(self) -> int:
        return self.layout.max_model_len

    @property
    def embedding_dim(self) -> int:
        return self.layout.embedding_dim


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


def load_model(config: ModelConfig) -> LoadedModel:
    """Resolve, read and load the model the config names; raises ModelLoadError with the reason."""
    from transformers import AutoModel

    directory = resolve_model_dir(config.model, config.revision)
    layout = read_layout(directory, config.max_model_len)
    device = choose_device(config.device)
    dtype = choose_dtype(config.dtype, device)
    tokenizer_json = load_tokenizer_json(directory)
    Tokenizer.from_str(tokenizer_json)  # fail at start-up, not on the first request
    try:
        transformer = AutoModel.from_pretrained(
            str(directory), dtype=dtype, attn_implementation="sdpa"
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load the transformer from {directory}: {exc}") from exc
    dense = [build_dense(spec).to(dtype=torch.float32) for spec in layout.dense]
    module = EmbeddingModule(transformer, layout.pooling_modes, dense).to(device).eval()
    logger.info(
        "loaded %s (%s, %s on %s, max_model_len %d, dim %d)",
        directory,
        layout.architecture,
        dtype,
        device,
        layout.max_model_len,
        layout.embedding_dim,
    )
    return LoadedModel(
        name=_model_name(config, directory),
        layout=layout,
        tokenizer_json=tokenizer_json,
        module=module,
        device=device,
        dtype=dtype,
    )
