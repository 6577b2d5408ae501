"""Static embedding models read from their directories: a table of token vectors and a tokenizer,
no transformer (models/layout.py reads the others).

Two on-disk layouts, each served by the rules of the library that wrote it:

- **model2vec** (`config.json` with `model_type: model2vec`; `model.safetensors` with
  `embeddings`, and for a vocabulary-quantized model `mapping` (token id → row) and `weights`
  (a weight per token id); `embedding_dtype` float32, float16 or int8). `StaticModel.encode`
  cuts each text to `max_length` × the median token length in characters, tokenizes without
  special tokens, keeps the first `max_length` tokens, drops the unknown token, and averages
  the weighted rows; `normalize` says whether the mean is normalized.
- **sentence-transformers `StaticEmbedding`** (`modules.json` naming it; its folder,
  `0_StaticEmbedding/` as published or the root as `save()` writes it, holds
  `model.safetensors` with `embedding.weight` and `tokenizer.json`; then `Normalize` or not):
  tokens without special tokens (cut where tokenizer.json truncates, else never), every token
  averaged (an `EmbeddingBag` in mean mode).

model2vec's `save_pretrained` writes both a model2vec `config.json` and a `modules.json`: its
table's name (`embeddings`) says whose files they are, and model2vec's rules serve it. Either
way a text that tokenizes to nothing gets a zero vector, as both libraries give it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any, Literal

from tokenizers import Tokenizer

from poolserve.errors import ModelLoadError
from poolserve.models.tensor_file import TensorFile

Library = Literal["model2vec", "sentence-transformers"]
# model2vec's own default where its config.json gives no max_length.
MODEL2VEC_MAX_LENGTH = 512
TABLE_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
# The table's tensor name in each library's files.
ST_TENSOR = "embedding.weight"
MODEL2VEC_TENSOR = "embeddings"
# The numpy names of the table dtypes served (safetensors names them F32, F16, ...).
TABLE_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I8": "int8",
}


@dataclass(frozen=True)
class StaticTable:
    """A static model's table and how texts become its rows."""

    library: Library
    table_file: Path
    tokenizer_file: Path
    # The table's tensor, and where present the token → row mapping and the per-token weights.
    tensor: str
    mapping: str | None
    token_weights: str | None
    # The table's stored dtype (numpy's name); its means are float32 whatever it is.
    dtype: str
    rows: int
    dim: int
    # Token ids the tokenizer can give (with its added tokens).
    vocab_size: int
    # model2vec: the unknown token, left out of every mean (None: nothing left out).
    unknown_id: int | None
    # The tokens a text is cut to (model2vec's max_length, or where tokenizer.json truncates,
    # or --max-model-len); None: never cut.
    max_length: int | None
    # model2vec: texts are cut to max_length × this many characters before tokenizing.
    chars_per_token: int | None


def static_folder(root: Path) -> Path | None:
    """Where a static model's table lies under `root` (its StaticEmbedding module's folder, or
    a model2vec directory itself); None for any other model."""
    modules_file = root / "modules.json"
    if modules_file.is_file():
        modules = _read_json(modules_file)
        first = modules[0] if isinstance(modules, list) and modules else {}
        if str(first.get("type", "")).rsplit(".", 1)[-1] == "StaticEmbedding":
            return root / str(first.get("path", "") or ".")
        return None
    return root if _is_model2vec(root) else None


def table_needed(root: Path) -> bool:
    """Whether what `root` is can be told only from its table, which is not there yet (a hub
    model described before its weights are fetched): a StaticEmbedding module's folder without
    its table, or a config.json naming no transformers model (model2vec wrote such configs
    before it wrote `model_type`) without a modules.json."""
    folder = static_folder(root)
    if folder is not None:
        return not (folder / TABLE_FILE).is_file()
    config_file = root / "config.json"
    if (root / "modules.json").is_file() or not config_file.is_file():
        return False
    config = _read_json(config_file)
    return (
        isinstance(config, dict)
        and "model_type" not in config
        and "architectures" not in config
        and not (root / TABLE_FILE).is_file()
    )


def _is_model2vec(folder: Path) -> bool:
    """A model2vec directory without modules.json: its config.json says so (`model_type`,
    `architectures`), or names no transformers model beside a table of model2vec's."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        return False
    config = _read_json(config_file)
    if not isinstance(config, dict):
        return False
    if config.get("model_type") == "model2vec" or "StaticModel" in (
        config.get("architectures") or ()
    ):
        return True
    table_file = folder / TABLE_FILE
    return (
        "model_type" not in config
        and table_file.is_file()
        and MODEL2VEC_TENSOR in TensorFile.open(table_file).entries
    )


def read_static(root: Path, folder: Path, max_model_len: int | None) -> StaticTable:
    """The table under `folder`, served by the rules of the library whose files it is (its
    tensor's name says: model2vec's `embeddings`, sentence-transformers' `embedding.weight`);
    ModelLoadError, one line, for a file that is missing or does not hold what it should."""
    table_file, tokenizer_file = folder / TABLE_FILE, folder / TOKENIZER_FILE
    for path in (table_file, tokenizer_file):
        if not path.is_file():
            raise ModelLoadError(f"{root} is a static embedding model without {path.name}")
    header = TensorFile.open(table_file)
    tensor = ST_TENSOR if ST_TENSOR in header.entries else MODEL2VEC_TENSOR
    library: Library = "model2vec" if tensor == MODEL2VEC_TENSOR else "sentence-transformers"
    entry = header.entries.get(tensor)
    if entry is None or len(entry.shape) != 2 or entry.dtype not in TABLE_DTYPES:
        raise ModelLoadError(
            f"{table_file} holds no table of token vectors ({ST_TENSOR} or {MODEL2VEC_TENSOR}, "
            f"2-D, one of {', '.join(TABLE_DTYPES)}); it has {sorted(header.entries)}"
        )
    tokenizer_json = tokenizer_file.read_text(encoding="utf-8")
    tokenizer = Tokenizer.from_str(tokenizer_json)
    definition = json.loads(tokenizer_json)
    if library == "model2vec":
        config_file = folder / "config.json"
        config = _read_json(config_file) if config_file.is_file() else {}
        own = config.get("max_length", MODEL2VEC_MAX_LENGTH)
        unknown_id = _unknown_id(tokenizer, definition)
        # As model2vec: the median length of the vocabulary's tokens, rounded down.
        chars: int | None = int(median(len(token) for token in tokenizer.get_vocab()))
    else:
        truncation = definition.get("truncation") or {}
        if truncation and str(truncation.get("direction", "Right")).lower() != "right":
            raise ModelLoadError(
                f"{tokenizer_file} truncates from the left; a static model is served cutting "
                "texts at their end"
            )
        own = truncation.get("max_length")
        unknown_id, chars = None, None
    return StaticTable(
        library=library,
        table_file=table_file,
        tokenizer_file=tokenizer_file,
        tensor=tensor,
        mapping="mapping" if "mapping" in header.entries else None,
        token_weights="weights" if "weights" in header.entries else None,
        dtype=TABLE_DTYPES[entry.dtype],
        rows=entry.shape[0],
        dim=entry.shape[1],
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        unknown_id=unknown_id,
        max_length=max_model_len or (int(own) if own else None),
        chars_per_token=chars,
    )


def _unknown_id(tokenizer: Tokenizer, definition: dict[str, Any]) -> int | None:
    """The id model2vec drops from every text: the unknown token of a WordPiece, BPE or
    WordLevel model, a Unigram model's `unk_id`."""
    model = definition.get("model") or {}
    if "unk_id" in model:
        return None if model["unk_id"] is None else int(model["unk_id"])
    token = model.get("unk_token")
    if token is None:
        return None
    found: int | None = tokenizer.token_to_id(token)
    return found


def plain_tokenizer_json(tokenizer_json: str) -> str:
    """The tokenizer without its post-processor: both libraries tokenize without special tokens
    ([CLS], [SEP], <s>), and a tokenizer with none to add never adds any, whoever asks. Its
    truncation and padding go too (the server cuts texts itself; `read_static` has read where
    the file truncates), so one tokenizer saved by either library is one definition."""
    definition = json.loads(tokenizer_json)
    definition.update(post_processor=None, truncation=None, padding=None)
    return json.dumps(definition, ensure_ascii=False)


def static_config(table: StaticTable) -> dict[str, Any]:
    """What a static model's config says, as config.json's keys (model2vec's config, or the
    table's shape for a sentence-transformers one)."""
    config_file = table.table_file.parent / "config.json"
    if table.library == "model2vec" and config_file.is_file():
        config = _read_json(config_file)
        if isinstance(config, dict):
            return config
    return {"model_type": "static", "hidden_dim": table.dim, "vocab_size": table.vocab_size}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc
