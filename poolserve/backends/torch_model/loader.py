"""Loading a pooling model's weights: the transformers backbone of its kind, the
sentence-transformers modules around it, the torch module on the spec's device (on the runner
thread), and whether it can run packed batches."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from poolserve.backends.progress import progress
from poolserve.backends.torch_model.dense import build_dense, load_linear_head, load_m3_heads
from poolserve.backends.torch_model.device import place, torch_dtype
from poolserve.backends.torch_model.image_text import ImageTextModule
from poolserve.backends.torch_model.module import NextTokenScorer, PoolingModule
from poolserve.backends.torch_model.packing import (
    ProbeRow,
    packing_of,
    required_score_difference,
    required_similarity,
    similarity_packed_to_alone,
    why_not_packable,
)
from poolserve.backends.torch_model.sequence_head import SequenceHead, base_model
from poolserve.config.model_config import PackingMode
from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.kinds import Head, Kind, describe
from poolserve.models.layout import TRUST_REMOTE_CODE
from poolserve.models.spec import ModelSpec

logger = logging.getLogger(__name__)


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
    """Load the weights and build the module on the spec's device (call on the runner thread;
    a spec not placed yet is placed here)."""
    spec = place(spec)
    if spec.dtype == "auto":
        raise ValueError(
            "load_module needs a dtype: `auto` on this CPU is measured by the backend "
            "(precision.py); name float32 or bfloat16"
        )
    layout = spec.layout
    started = time.perf_counter()
    with progress(
        logger, f"{spec.name}: loading the weights from {layout.directory}", announce=False
    ):
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


def choose_packing(
    module: PoolingModule | ImageTextModule, spec: ModelSpec, packing: PackingMode
) -> frozenset[Head]:
    """The heads that run packed batches (`enable_packing` unless `packing` is off), said in
    one log line."""
    if packing == "off":
        logger.info("%s: padded batches in length buckets (--packing off)", spec.name)
        return frozenset()
    why = enable_packing(module, spec)
    packed = frozenset(head for head in spec.heads if module.packs(head))
    if why is not None:
        logger.info(
            "%s: padded batches in length buckets: it cannot run packed batches (%s)",
            spec.name,
            why,
        )
    else:
        log_packed(spec, packed)
    return packed


def log_packed(spec: ModelSpec, packed: frozenset[Head]) -> None:
    padded = sorted(set(spec.heads) - packed)
    logger.info(
        "%s: packed batches (several inputs to a row, no padding to the longest)%s",
        spec.name,
        f"; {', '.join(padded)} in padded length buckets" if padded else "",
    )


def enable_packing(module: PoolingModule | ImageTextModule, spec: ModelSpec) -> str | None:
    """Let `module` run packed batches if the checks of `pack_if_checked` pass; else say why
    not."""
    spec = place(spec)
    if isinstance(module, ImageTextModule):
        return "an image-text model's towers pool their own way"
    return pack_if_checked(
        module,
        heads=spec.heads,
        max_model_len=spec.max_model_len,
        own_code=spec.trust_remote_code and spec.layout.ships_code,
        dtype=spec.dtype,
        device=torch.device(spec.device),
    )


def pack_if_checked(
    module: PoolingModule,
    *,
    heads: tuple[Head, ...],
    max_model_len: int,
    own_code: bool,
    dtype: str,
    device: torch.device,
) -> str | None:
    """Let `module` run packed batches if its backbone gives each packed sequence the outputs it
    has alone, and a sequence classifier's head, applied per sequence, the logits the model gives
    each alone (both checked now, on two sequences); else say why not."""
    backbone, head = module.backbone, None
    if module.next_token is None and heads == ("classify",):
        head = SequenceHead.of(backbone)
        if head is None:
            return f"poolserve cannot apply {type(backbone).__name__}'s head per sequence"
        backbone = base_model(backbone)
    why = why_not_packable(backbone, max_model_len, own_code)
    if why is not None:
        return why
    try:
        packing = packing_of(backbone, max_model_len, device)
    except ValueError as error:  # its sliding windows cannot be read
        return str(error)
    try:
        similarity = similarity_packed_to_alone(backbone, packing, module.vocab_size, device)
    except (RuntimeError, ValueError, TypeError) as error:  # e.g. DeBERTa's relative attention
        return f"its attention fails on a packed row ({type(error).__name__}: {error})"
    if similarity < required_similarity(dtype):
        return f"a packed row's outputs differ from its sequences' alone (cosine {similarity:.5f})"
    module.packing, module.sequence_head = packing, head
    if head is None:
        return None
    why = None
    try:
        difference = _scores_packed_against_alone(module, device)
        if difference > required_score_difference(dtype):
            why = f"its head applied per sequence gives other logits (by {difference:.2g})"
    except (RuntimeError, ValueError, TypeError, IndexError) as error:
        why = f"its head fails on a packed row ({type(error).__name__}: {error})"
    if why is not None:
        module.packing = module.sequence_head = None
    return why


def _scores_packed_against_alone(module: PoolingModule, device: torch.device) -> float:
    """The largest difference between a sequence classifier's logits for two sequences packed in
    one row and for each alone, relative to their size."""
    probe = ProbeRow.of(module.vocab_size, device)
    with torch.inference_mode():
        alone = torch.cat(
            [
                module("classify", ids, torch.ones_like(ids))
                for ids in (probe.alone(0), probe.alone(1))
            ]
        )
        packed = module.forward_packed(
            "classify",
            probe.input_ids,
            probe.positions,
            probe.segments,
            (probe.segments >= 0).long(),
            probe.first,
            probe.last,
        )
    return float((packed - alone).abs().max() / (1.0 + alone.abs().max()))
