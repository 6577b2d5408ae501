"""Loading a pooling model: directory → layout → tokenizer and torch module on the chosen device."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from poolserve.config import ModelConfig
from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.dense import build_dense, load_linear_head, load_m3_heads
from poolserve.models.device import choose_device, choose_dtype, torch_dtype
from poolserve.models.image_text import ImageTextModule
from poolserve.models.kinds import Kind, describe, detect_kind
from poolserve.models.layout import TRUST_REMOTE_CODE, read_layout
from poolserve.models.module import NextTokenScorer, PoolingModule
from poolserve.models.packing import (
    packing_of,
    required_similarity,
    similarity_packed_to_alone,
    why_not_packable,
)
from poolserve.models.resolve import DEFAULT_MODEL_ID, resolve_model_dir
from poolserve.models.score_template import template_for, with_token_ids
from poolserve.models.spec import ModelSpec
from poolserve.models.vision import pad_token
from poolserve.settings import check_settings

logger = logging.getLogger(__name__)

__all__ = ["ModelSpec", "enable_packing", "load_module", "prepare_model"]


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
    """Resolve the model, read its layout and tokenizer; raises ModelLoadError with the reason.
    Without `weights`, a hub model's weights are not downloaded (for checks before serving).

    A model whose own length limit is more than `max_batch_tokens` (Qwen3-Embedding's 32,768
    against the default 16,384) is served up to that budget, unless `--max-model-len` asked for
    more (then the engine refuses to start): `capped_from` says so, for one log line."""
    directory = resolve_model_dir(config.model, config.revision, weights=weights)
    layout = read_layout(
        directory, config.max_model_len, trust_remote_code=config.trust_remote_code
    )
    capped_from = None
    if (
        max_batch_tokens is not None
        and config.max_model_len is None
        and layout.max_model_len > max_batch_tokens
    ):
        capped_from = layout.max_model_len
        layout = replace(layout, max_model_len=max_batch_tokens)
    kind = detect_kind(layout, config.task)
    if config.prompts and kind != "embedding":
        raise SettingError(
            f"--prompt applies to embedding models; this is {describe(kind)}, which takes no "
            "prompts"
        )
    device = choose_device(config.device)
    dtype = choose_dtype(config.dtype, device)
    check_settings(config)  # what each flag would refuse, given in Python
    if config.score_template is not None and not (kind == "cross_encoder" and layout.is_causal_lm):
        raise SettingError(
            "--score-template applies to a causal LM served as a reranker (--task "
            f"cross_encoder); this is {describe(kind)} ({layout.architecture})"
        )
    if layout.vision is not None and kind != "embedding":
        raise SettingError(
            f"{directory} is an image-text model ({layout.architecture}): it serves as an "
            f"embedding model (text and image vectors), not as {describe(kind)}; leave --task out"
        )
    tokenizer_json = load_tokenizer_json(layout.directory)
    try:
        tokenizer = Tokenizer.from_str(tokenizer_json)  # fail at start-up, not at a request
    except Exception as exc:
        raise ModelLoadError(f"{directory}: the tokenizer cannot be loaded: {exc}") from exc
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
        device=device,
        dtype=dtype,
        forced_task=config.task if config.task not in (None, "auto") else None,
        prompts=config.prompts,
        trust_remote_code=config.trust_remote_code,
        attention=config.attention,
        score_template=template,
        capped_from=capped_from,
        tokenizer_pad_id=pad_id,
    )


# Encoder-decoder families whose sentence-transformers models run the encoder alone (as
# sentence-transformers' Transformer module loads them): AutoModel would build the whole
# encoder-decoder and find no decoder weights.
_ENCODER_CLASSES = {"t5": "T5EncoderModel", "mt5": "MT5EncoderModel", "umt5": "UMT5EncoderModel"}


def _backbone_class(spec: ModelSpec) -> Any:
    import transformers

    if spec.score_template is not None:
        return transformers.AutoModelForCausalLM
    classes: dict[Kind, Any] = {
        "cross_encoder": transformers.AutoModelForSequenceClassification,
        "classifier": transformers.AutoModelForSequenceClassification,
        "sparse": transformers.AutoModelForMaskedLM,
        "token_classifier": transformers.AutoModelForTokenClassification,
    }
    if spec.kind in classes:
        return classes[spec.kind]
    layout = spec.layout
    encoder = _ENCODER_CLASSES.get(layout.model_type)
    if encoder is None and layout.architecture.endswith("EncoderModel"):
        encoder = layout.architecture
    if (
        encoder is not None
        and hasattr(transformers, encoder)
        and not (spec.trust_remote_code and layout.ships_code)
    ):
        return getattr(transformers, encoder)
    return transformers.AutoModel


# Weights a backbone may lack because nothing poolserve runs reads them: an embedding model's
# pooler (its output is never used; many checkpoints are saved without one).
_UNUSED_WHEN_MISSING: dict[Kind, tuple[str, ...]] = {
    "embedding": ("pooler.",),
    "late_interaction": ("pooler.",),
}


def _refuse_untrained(spec: ModelSpec, loading_info: dict[str, Any]) -> None:
    """Raise if transformers had to initialise any layer poolserve would run at random: a head
    the checkpoint lacks (an embedding model forced to `task="score"`) or one whose shape differs.
    """
    unused = _UNUSED_WHEN_MISSING.get(spec.kind, ())
    missing = sorted(
        key for key in loading_info.get("missing_keys", ()) if not key.startswith(unused)
    )
    mismatched = sorted(str(entry[0]) for entry in loading_info.get("mismatched_keys", ()))
    if not missing and not mismatched:
        return
    shown = ", ".join((missing + mismatched)[:4]) + (
        f" and {len(missing) + len(mismatched) - 4} more" if len(missing + mismatched) > 4 else ""
    )
    what = "lacks" if missing else "has differently shaped"
    if spec.layout.ships_code and not spec.trust_remote_code:
        # Loaded with transformers' own class of its model_type, which its weights do not fit.
        raise ModelLoadError(
            f"{spec.layout.directory} ships its own model code (config.json auto_map), and "
            f"transformers' own class for model_type {spec.layout.model_type!r} {what} weights "
            f"it needs ({shown}); " + TRUST_REMOTE_CODE
        )
    raise ModelLoadError(
        f"{spec.layout.directory} {what} the weights {describe(spec.kind)} needs ({shown}); "
        f"they would be random. It was read as {describe(spec.kind)}"
        + (f" because task={spec.forced_task!r} was asked for" if spec.forced_task else "")
        + f"; its checkpoint is a {spec.layout.architecture}"
    )


def _from_pretrained(spec: ModelSpec) -> torch.nn.Module:
    """The transformers model of the spec's kind, refusing randomly initialised layers, without
    transformers' progress bar (a notebook would print it on every Engine())."""
    from transformers.utils import logging as transformers_logging

    model_class = _backbone_class(spec)
    bar_was_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    # Its load report (missing and unexpected weights) is poolserve's to judge: missing ones
    # are refused below in one line, the others are heads this kind does not use.
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        backbone, loading_info = model_class.from_pretrained(
            str(spec.layout.directory),
            dtype=torch_dtype(spec.dtype),
            attn_implementation=None if spec.attention == "auto" else spec.attention,
            trust_remote_code=spec.trust_remote_code,
            output_loading_info=True,
            # Weights whose shapes do not fit come back in the loading info, refused below by
            # name (transformers would raise a RuntimeError pointing at its log).
            ignore_mismatched_sizes=True,
        )
    except (OSError, ValueError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if spec.attention != "auto" and "attention" in message.lower():
            raise SettingError(
                f"--attention {spec.attention}: {message}; use --attention auto (or eager)"
            ) from exc
        raise ModelLoadError(
            f"cannot load the model from {spec.layout.directory}: {message}"
        ) from exc
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bar_was_on:
            transformers_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
    _refuse_untrained(spec, loading_info)
    attention = getattr(backbone.config, "_attn_implementation", None)
    own_code = spec.trust_remote_code and spec.layout.ships_code  # it chooses for itself
    if spec.attention == "auto" and attention not in (None, "sdpa") and not own_code:
        logger.info(
            "%s: %s has no scaled-dot-product attention in transformers; running %s attention "
            "(--attention to choose)",
            spec.name,
            type(backbone).__name__,
            attention,
        )
    return backbone  # type: ignore[no-any-return]


def load_module(spec: ModelSpec) -> PoolingModule | ImageTextModule:
    """Load the weights and build the module on the spec's device (call on the runner thread)."""
    layout = spec.layout
    started = time.perf_counter()
    backbone = _from_pretrained(spec)
    if layout.vision is not None:
        image_text = ImageTextModule(backbone, layout.vision, spec.pad_token_id)
        _loaded(spec, started)
        return image_text.to(torch.device(spec.device)).eval()
    dense: list[torch.nn.Module] = [build_dense(dense_spec) for dense_spec in layout.dense]
    if spec.kind == "late_interaction" and not dense:
        dense = [load_linear_head(layout.directory)]
    scorer = None
    if spec.score_template is not None:
        # The decoder alone runs; the score needs only two rows of the LM head.
        causal_lm: Any = backbone
        scorer = NextTokenScorer.of_causal_lm(causal_lm, spec.score_template.token_ids)
        backbone = causal_lm.get_decoder()
    module = PoolingModule(
        spec.kind,
        backbone,
        pooling_modes=layout.pooling_modes,
        dense=dense,
        splade_strategy=layout.splade_strategy,
        splade_activation=layout.splade_activation,
        next_token=scorer,
        m3=load_m3_heads(layout.directory, spec.special_token_ids)
        if spec.kind == "embedding" and layout.m3_heads
        else None,
    )
    module = module.to(torch.device(spec.device)).eval()
    _loaded(spec, started)
    return module


def _loaded(spec: ModelSpec, started: float) -> None:
    logger.info(
        "%s: weights loaded in %.1f s from %s: %s (%s), %s on %s, max_model_len %d",
        spec.name,
        time.perf_counter() - started,
        spec.layout.directory,
        spec.kind,
        spec.layout.architecture,
        spec.dtype,
        spec.device,
        spec.layout.max_model_len,
    )


def enable_packing(module: PoolingModule | ImageTextModule, spec: ModelSpec) -> str | None:
    """Let `module` run packed batches if its backbone gives each packed sequence the outputs it
    has alone (checked now, on two sequences); else say why not."""
    if isinstance(module, ImageTextModule):
        return "an image-text model's towers pool their own way"
    if not any(head != "classify" or module.next_token is not None for head in spec.heads):
        return "its classifier head reads the first position of each row"
    backbone = module.backbone
    own_code = spec.trust_remote_code and spec.layout.ships_code
    why = why_not_packable(backbone, spec.max_model_len, own_code)
    if why is not None:
        return why
    packing = packing_of(backbone)
    similarity = similarity_packed_to_alone(
        backbone, packing, module.vocab_size, torch.device(spec.device)
    )
    if similarity < required_similarity(spec.dtype):
        return f"a packed row's outputs differ from its sequences' alone (cosine {similarity:.5f})"
    module.packing = packing
    return None
