"""Reading a model directory's layout: the sentence-transformers modules around the transformer.

A sentence-transformers directory lists its modules in `modules.json` (Transformer, Pooling,
Dense, Normalize); a plain transformers directory has only `config.json`, and then pooling falls
back to mean pooling with normalization, the common default for embedding models (last-token
pooling for a causal LM, as decoder embedders pool).

Sizes come from the configuration transformers loads (`AutoConfig`), never from raw JSON keys:
DistilBERT calls its width `dim`, GPT-2-style configs `n_embd`, T5 `d_model`, and each config
class maps them to `hidden_size`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.static_layout import StaticTable, read_static, static_config, static_folder
from poolserve.models.vision import VisionLayout, image_family, read_vision

# Class-name endings of decoder checkpoints saved with their language-model head.
CAUSAL_LM_CLASSES = ("ForCausalLM", "LMHeadModel")
# BGE-M3's multi-vector and lexical heads, stored beside its encoder as torch state dicts.
M3_HEAD_FILES = ("colbert_linear.pt", "sparse_linear.pt")
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# sentence-transformers' older boolean keys, in its concatenation order.
_LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


@dataclass(frozen=True)
class DenseSpec:
    """A sentence-transformers Dense module: a linear layer and an activation."""

    directory: Path
    in_features: int
    out_features: int
    bias: bool
    activation: str


@dataclass(frozen=True)
class ModelLayout:
    """What poolserve needs to know about a model directory before loading weights."""

    directory: Path
    architecture: str
    hf_config: dict[str, Any]
    # Pooling modes, concatenated in this order.
    pooling_modes: tuple[str, ...]
    dense: tuple[DenseSpec, ...]
    normalize: bool
    max_model_len: int
    hidden_size: int
    # sentence-transformers module class names in order ("Transformer", "Pooling", ...).
    module_types: tuple[str, ...] = ()
    # config_sentence_transformers.json (prompts, model type), empty where absent.
    st_config: dict[str, Any] = field(default_factory=dict)
    # Whether a prompt's tokens are pooled with the text's (the Pooling module's include_prompt).
    include_prompt: bool = True
    # SPLADE pooling: "max" or "sum" over tokens, of "relu" or "log1p_relu" activations.
    splade_strategy: str = "max"
    splade_activation: str = "relu"
    # Stanford ColBERT's artifact.metadata (markers, query_maxlen, ...), empty where absent.
    colbert_metadata: dict[str, Any] = field(default_factory=dict)
    # BGE-M3's extra heads beside the encoder: colbert_linear.pt and sparse_linear.pt.
    m3_heads: bool = False
    # The Matryoshka dimension sentence-transformers truncates to (its truncate_dim), or None.
    truncate_dim: int | None = None
    # An image-text model's image side (CLIP, SigLIP); None for a text model.
    vision: VisionLayout | None = None
    # A static embedding model's table (model2vec, StaticEmbedding); None for a transformer.
    static: StaticTable | None = None

    @property
    def model_type(self) -> str:
        return str(self.hf_config.get("model_type", ""))

    @property
    def is_causal_lm(self) -> bool:
        """A decoder checkpoint saved with its language-model head (Qwen3ForCausalLM, ...)."""
        return self.architecture.endswith(CAUSAL_LM_CLASSES)

    @property
    def ships_code(self) -> bool:
        """Whether config.json points at model code stored with the checkpoint (auto_map)."""
        return bool(self.hf_config.get("auto_map"))

    @property
    def num_labels(self) -> int:
        """Output labels of a classification head, from id2label or num_labels."""
        id2label = self.hf_config.get("id2label")
        if isinstance(id2label, dict) and id2label:
            return len(id2label)
        return int(self.hf_config.get("num_labels", 2))

    @property
    def embedding_dim(self) -> int:
        if self.vision is not None:
            return self.vision.embedding_dim
        if self.dense:
            return self.dense[-1].out_features
        return self.hidden_size * len(self.pooling_modes)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc


TRUST_REMOTE_CODE = (
    "--trust-remote-code (trust_remote_code=True in Python) runs it; that code runs with the "
    "server's rights, so trust its source first"
)


def load_hf_config(directory: Path, hf_config: dict[str, Any], trust_remote_code: bool) -> Any:
    """The model's configuration as transformers reads it (its own class, or the checkpoint's
    code with `trust_remote_code`)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(directory), trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        model_type = hf_config.get("model_type")
        if hf_config.get("auto_map") and not trust_remote_code:
            raise ModelLoadError(
                f"{directory} ships its own model code (config.json auto_map, model_type "
                f"{model_type!r}), which transformers has no class of its own for; "
                + TRUST_REMOTE_CODE
            ) from exc
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(
            f"{directory}/config.json cannot be read by transformers (model_type "
            f"{model_type!r}): {first_line}"
        ) from exc


def _text_config(config: Any) -> Any:
    """The text model's part of a composite configuration (itself for most models)."""
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


# sentence-transformers' CLIP module: the transformers checkpoint sits in the module's folder
# (clip-ViT-B-32's `0_CLIPModel`), with no config.json beside modules.json.
_CHECKPOINT_MODULES = ("CLIPModel",)


def transformers_directory(directory: Path) -> Path:
    """Where the transformers checkpoint of a model directory is: the directory itself, or the
    folder of a sentence-transformers module that holds one (see `_CHECKPOINT_MODULES`)."""
    modules_file = directory / "modules.json"
    if (directory / "config.json").is_file() or not modules_file.is_file():
        return directory
    for module in _read_json(modules_file):
        if str(module.get("type", "")).rsplit(".", 1)[-1] in _CHECKPOINT_MODULES:
            return directory / str(module.get("path", ""))
    return directory


def read_layout(
    directory: Path, max_model_len: int | None = None, *, trust_remote_code: bool = False
) -> ModelLayout:
    """Read config.json and the sentence-transformers module files of a model directory.
    The layout's `directory` is where the transformers checkpoint is (`transformers_directory`);
    the sentence-transformers files are read from `directory`. A static embedding model
    (models/static_layout.py) is read without transformers."""
    folder = static_folder(directory)
    if folder is not None:
        return _static_layout(directory, folder, max_model_len)
    root, directory = directory, transformers_directory(directory)
    hf_config = _read_json(directory / "config.json")
    if not isinstance(hf_config, dict):
        raise ModelLoadError(f"{directory}/config.json is not a JSON object")
    architectures = hf_config.get("architectures") or ["AutoModel"]
    config = load_hf_config(directory, hf_config, trust_remote_code)
    family = image_family(hf_config)
    vision = read_vision(directory, config, family) if family is not None else None
    text_config = _text_config(config)
    hidden_size = int(getattr(text_config, "hidden_size", 0) or 0)
    if hidden_size <= 0:
        raise ModelLoadError(f"{directory}/config.json does not give the hidden size")

    causal = str(architectures[0]).endswith(CAUSAL_LM_CLASSES)
    modules = _read_modules(root, ("lasttoken",) if causal else ("mean",))
    st_file = root / "config_sentence_transformers.json"
    st_config = _read_json(st_file) if st_file.is_file() else {}
    metadata_file = directory / "artifact.metadata"
    colbert_metadata = _read_json(metadata_file) if metadata_file.is_file() else {}
    limit = _length_limit(root, directory, text_config, colbert_metadata, max_model_len)
    return ModelLayout(
        directory=directory,
        architecture=str(architectures[0]),
        hf_config=hf_config,
        pooling_modes=modules.pooling_modes,
        dense=tuple(modules.dense),
        normalize=modules.normalize,
        max_model_len=limit,
        hidden_size=hidden_size,
        module_types=tuple(modules.types),
        splade_strategy=str(modules.splade.get("pooling_strategy", "max")),
        splade_activation=str(modules.splade.get("activation_function", "relu")),
        colbert_metadata=colbert_metadata,
        include_prompt=modules.include_prompt,
        st_config=st_config,
        m3_heads=all((directory / name).is_file() for name in M3_HEAD_FILES),
        truncate_dim=int(st_config["truncate_dim"]) if st_config.get("truncate_dim") else None,
        vision=vision,
    )


# The length limit of a static model that never cuts a text: any, within the batch budget
# (models/describe.py serves it up to --max-batch-tokens).
NO_LENGTH_LIMIT = 2**31 - 1


def _static_layout(root: Path, folder: Path, max_model_len: int | None) -> ModelLayout:
    """A static model's layout: its table, its modules (Normalize, or none after the table) and
    sentence-transformers' config (prompts, truncate_dim)."""
    table = read_static(root, folder, max_model_len)
    modules = _read_modules(root, ("mean",))
    others = [kind for kind in modules.types[1:] if kind != "Normalize"]
    if others:
        raise ModelLoadError(
            f"{root}: its StaticEmbedding is followed by {others[0]}; a static model is served "
            "with a Normalize module after it, or nothing"
        )
    config = static_config(table)
    st_file = root / "config_sentence_transformers.json"
    st_config = _read_json(st_file) if st_file.is_file() else {}
    if table.library == "model2vec":
        normalize = bool(config.get("normalize", False))  # model2vec's own default
    else:
        normalize = "Normalize" in modules.types
    return ModelLayout(
        directory=root,
        architecture="StaticModel" if table.library == "model2vec" else "StaticEmbedding",
        hf_config=config,
        pooling_modes=("mean",),
        dense=(),
        normalize=normalize,
        max_model_len=table.max_length or NO_LENGTH_LIMIT,
        hidden_size=table.dim,
        module_types=tuple(modules.types),
        st_config=st_config,
        truncate_dim=int(st_config["truncate_dim"]) if st_config.get("truncate_dim") else None,
        static=table,
    )


@dataclass
class _Modules:
    """What the sentence-transformers modules around the transformer say (without a
    modules.json: the defaults of a plain transformers directory)."""

    pooling_modes: tuple[str, ...]
    dense: list[DenseSpec] = field(default_factory=list)
    normalize: bool = True
    types: list[str] = field(default_factory=list)
    splade: dict[str, Any] = field(default_factory=dict)
    include_prompt: bool = True


def _read_modules(root: Path, pooling_modes: tuple[str, ...]) -> _Modules:
    """The modules modules.json lists in `root` (`pooling_modes`: the pooling without one)."""
    modules = _Modules(pooling_modes)
    modules_file = root / "modules.json"
    if not modules_file.is_file():
        return modules
    modules.normalize = False
    for module in _read_json(modules_file):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        modules.types.append(kind)
        module_dir = root / module.get("path", "")
        if kind == "Pooling":
            modules.pooling_modes = _read_pooling_modes(module_dir / "config.json")
            pooling = _read_json(module_dir / "config.json")
            modules.include_prompt = bool(pooling.get("include_prompt", True))
        elif kind == "Dense":
            modules.dense.append(_read_dense(module_dir))
        elif kind == "Normalize":
            modules.normalize = True
        elif kind == "SpladePooling":
            modules.splade = _read_json(module_dir / "config.json")
    return modules


def _length_limit(
    root: Path,
    directory: Path,
    text_config: Any,
    colbert_metadata: dict[str, Any],
    max_model_len: int | None,
) -> int:
    """The most tokens one input may have: the model's, or less where asked."""
    limit = _model_length_limit(root, directory, text_config)
    if colbert_metadata.get("doc_maxlen"):
        # Stanford ColBERT's doc_maxlen counts the marker token inserted after [CLS].
        limit = min(limit, int(colbert_metadata["doc_maxlen"]) - 1)
    if max_model_len is not None:
        if max_model_len > limit:
            raise SettingError(
                f"--max-model-len {max_model_len} is more than the model supports ({limit})"
            )
        limit = max_model_len
    return limit


def _read_pooling_modes(path: Path) -> tuple[str, ...]:
    """Pooling modes from either config format: `pooling_mode` (new) or the boolean keys (old)."""
    config = _read_json(path)
    declared = config.get("pooling_mode")
    if declared is not None:
        modes = (declared,) if isinstance(declared, str) else tuple(declared)
    else:
        modes = tuple(mode for key, mode in _LEGACY_POOLING_KEYS.items() if config.get(key))
    unknown = [mode for mode in modes if mode not in POOLING_MODES]
    if unknown:
        raise ModelLoadError(f"{path}: pooling mode {unknown} is not supported ({POOLING_MODES})")
    return modes or ("mean",)


def _read_dense(directory: Path) -> DenseSpec:
    config = _read_json(directory / "config.json")
    return DenseSpec(
        directory=directory,
        in_features=int(config["in_features"]),
        out_features=int(config["out_features"]),
        bias=bool(config.get("bias", True)),
        activation=str(config.get("activation_function", "torch.nn.modules.linear.Identity")),
    )


def _model_length_limit(root: Path, directory: Path, config: Any) -> int:
    """sentence-transformers' max_seq_length, else the smaller of the model's and tokenizer's."""
    st_config = root / "sentence_bert_config.json"
    if st_config.is_file():
        max_seq_length = _read_json(st_config).get("max_seq_length")
        if max_seq_length:
            return int(max_seq_length)
    limits = []
    positions = getattr(config, "max_position_embeddings", None)
    if positions:
        limits.append(int(positions))
    tokenizer_config = directory / "tokenizer_config.json"
    if tokenizer_config.is_file():
        tokenizer_max = _read_json(tokenizer_config).get("model_max_length")
        # Tokenizers without a limit store a huge sentinel (int(1e30)).
        if isinstance(tokenizer_max, int | float) and 0 < tokenizer_max < 1_000_000:
            limits.append(int(tokenizer_max))
    if not limits:
        raise ModelLoadError(f"{directory}: cannot tell the model's maximum length")
    return min(limits)
