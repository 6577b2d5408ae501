"""A checkpoint described before anything is loaded (`prepare_model`): its directory resolved, its
layout read, its kind detected, its tokenizer parsed, its settings checked. The weights are the
backend's to load (backends/torch_model/loader.py)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from tokenizers import Tokenizer

from poolserve.config import ModelConfig
from poolserve.config.fields import check_settings
from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.kinds import Kind, describe, detect_kind
from poolserve.models.layout import NO_LENGTH_LIMIT, ModelLayout, read_layout
from poolserve.models.resolve import DEFAULT_MODEL_ID, resolve_model_dir
from poolserve.models.score_template import template_for, with_token_ids
from poolserve.models.spec import ModelSpec
from poolserve.models.static_layout import plain_tokenizer_json, table_needed
from poolserve.models.vision import pad_token

logger = logging.getLogger(__name__)

__all__ = ["ModelSpec", "prepare_model"]


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
    except (OSError, ValueError, ImportError) as exc:
        raise ModelLoadError(
            f"{directory}: no tokenizer.json and no convertible tokenizer ({_first_line(exc)})"
        ) from exc
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        # SigLIP's SiglipTokenizer: SentencePiece driven by Python code (it lowercases and
        # strips punctuation first), which no tokenizer.json states.
        raise ModelLoadError(
            f"{directory}: no tokenizer.json, and its tokenizer ({type(tokenizer).__name__}) "
            "runs in Python only, with no fast form to serve it with"
        )
    json_text: str = backend.to_str()
    return json_text


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def prepare_model(
    config: ModelConfig, max_batch_tokens: int | None = None, *, weights: bool = True
) -> ModelSpec:
    """Resolve the model, read its layout, parse its tokenizer and check its settings; raises
    ModelLoadError (a SettingError for a setting that cannot work) with the reason. Without
    `weights`, a hub model's weights are not downloaded (for checks before serving). Nothing is
    loaded and no backend is asked: the spec's device and dtype stay as asked until a backend
    places the model.

    A model whose own length limit is more than `max_batch_tokens` (Qwen3-Embedding's 32,768
    against the default 16,384) is served up to that budget, unless `--max-model-len` asked for
    more (then the engine refuses to start): `capped_from` says so, for one log line."""
    check_settings(config)  # what each flag would refuse, given in Python
    directory = _model_directory(config, weights)
    layout = read_layout(
        directory, config.max_model_len, trust_remote_code=config.trust_remote_code
    )
    capped_from = None
    if layout.max_model_len == NO_LENGTH_LIMIT and max_batch_tokens is not None:
        # A static model that never cuts a text: served up to the batch budget.
        layout = replace(layout, max_model_len=max_batch_tokens)
    elif (
        max_batch_tokens is not None
        and config.max_model_len is None
        and layout.max_model_len > max_batch_tokens
    ):
        capped_from = layout.max_model_len
        layout = replace(layout, max_model_len=max_batch_tokens)
    kind = detect_kind(layout, config.task)
    _check_kind_settings(config, layout, kind)
    tokenizer_json = _tokenizer_json(layout)
    tokenizer = _parse_tokenizer(tokenizer_json, directory)
    pad_id = None
    if layout.vision is not None and (token := pad_token(layout.directory)) is not None:
        pad_id = tokenizer.token_to_id(token)
    template = None
    if kind == "cross_encoder" and layout.is_causal_lm:
        template = with_token_ids(
            template_for(layout.model_type, config.score_template, directory),
            lambda text: tokenizer.encode(text, add_special_tokens=False).ids,
        )
    return ModelSpec(
        name=_model_name(config, directory),
        layout=layout,
        kind=kind,
        tokenizer_json=tokenizer_json,
        tokenizer=tokenizer,
        device=config.device,
        dtype=config.dtype,
        forced_task=config.task if config.task not in (None, "auto") else None,
        prompts=config.prompts,
        trust_remote_code=config.trust_remote_code,
        attention=config.attention,
        score_template=template,
        capped_from=capped_from,
        tokenizer_pad_id=pad_id,
    )


def _model_directory(config: ModelConfig, weights: bool) -> Path:
    """The model's directory; a hub model's weights only where asked, but a static model's
    table always: it is small, and its header is its description (its shape)."""
    directory = resolve_model_dir(config.model, config.revision, weights=weights)
    if not weights and table_needed(directory):
        directory = resolve_model_dir(config.model, config.revision, weights=True)
    return directory


def _tokenizer_json(layout: ModelLayout) -> str:
    """The tokenizer's definition (a static model's without special tokens to add)."""
    if layout.static is not None:
        return plain_tokenizer_json(layout.static.tokenizer_file.read_text(encoding="utf-8"))
    return load_tokenizer_json(layout.directory)


def _check_kind_settings(config: ModelConfig, layout: ModelLayout, kind: Kind) -> None:
    """Refuse settings that do not apply to a model of this kind (SettingError, one line)."""
    if config.prompts and kind != "embedding":
        raise SettingError(
            f"--prompt applies to embedding models; this is {describe(kind)}, which takes no "
            "prompts"
        )
    if config.score_template is not None and not (kind == "cross_encoder" and layout.is_causal_lm):
        raise SettingError(
            "--score-template applies to a causal LM served as a reranker (--task "
            f"cross_encoder); this is {describe(kind)} ({layout.architecture})"
        )
    if layout.vision is not None and kind != "embedding":
        raise SettingError(
            f"{layout.directory} is an image-text model ({layout.architecture}): it serves as an "
            f"embedding model (text and image vectors), not as {describe(kind)}; leave --task out"
        )


def _parse_tokenizer(tokenizer_json: str, directory: Path) -> Tokenizer:
    """The model's tokenizer, parsed once for the process (the CPU pool's threads parse their
    own), without the truncation and padding its file may set; fails at start-up, not at a
    request."""
    try:
        tokenizer = Tokenizer.from_str(tokenizer_json)
    except Exception as exc:
        raise ModelLoadError(f"{directory}: the tokenizer cannot be loaded: {exc}") from exc
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer
