"""Static embedding checkpoints written by the libraries that publish them, in their exact
on-disk layouts, and those libraries' own vectors as the references:

- model2vec (`StaticModel.save_pretrained`: config.json, model.safetensors with `embeddings`,
  and for a vocabulary-quantized model `mapping` and `weights`; float32, float16 or int8
  tables), over bert-base-uncased's WordPiece (the bundled MiniLM's) or XLM-RoBERTa's Unigram;
- sentence-transformers `StaticEmbedding` (`SentenceTransformer.save`: the module at the root,
  then Normalize), or as the hub publishes static-retrieval-mrl-en-v1 (`0_StaticEmbedding/`
  holding model.safetensors with `embedding.weight` and tokenizer.json, and prompts in
  config_sentence_transformers.json).

Vectors are random (seeded), the tokenizers real. Nothing here imports poolserve."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tests.model_zoo.tokenizer_files import write_xlmr_tokenizer
from tests.tiny_models import minilm_path

DIM = 48
QUERY_PROMPT = "query: "
# Real sentences in other scripts (the multilingual tokenizer's training lines).
MULTILINGUAL = [
    "Der schnelle braune Fuchs springt über den faulen Hund, während der Fluss zum Meer fließt.",
    "Le renard brun rapide saute par-dessus le chien paresseux; la rivière coule vers la mer.",
    "El rápido zorro marrón salta sobre el perro perezoso mientras el río corre hacia el mar.",
    "Быстрая коричневая лиса прыгает через ленивую собаку, а река течёт к морю.",
    "敏捷的棕色狐狸跳过了懒狗，河水流向大海。",
    "素早い茶色の狐がのろまな犬を飛び越え、川は海へと流れていく。",
    "Ο γρήγορος καφέ αλεπού πηδά πάνω από το τεμπέλικο σκυλί.",
    "ᚠᚢᚦᚨᚱᚲ ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",  # pieces the vocabulary lacks: unknown tokens
]
# Inputs at the rules' edges: unknown tokens alone and among words, nothing to tokenize,
# accents, and texts past model2vec's cut (its characters first, then its tokens).
EDGES = [
    "🤖",
    "🤖 robots 🤖 dream",
    "\u200b",
    "naïve café résumé",
    "x " * 900,
    "antidisestablishmentarianism " * 40,
    "word " * 600,
]

Tokenizers = Literal["bert", "xlmr"]


def _tokenizer(kind: Tokenizers, scratch: Path) -> Any:
    from tokenizers import Tokenizer

    if kind == "bert":
        return Tokenizer.from_file(str(minilm_path() / "tokenizer.json"))
    write_xlmr_tokenizer(scratch)
    return Tokenizer.from_file(str(scratch / "tokenizer.json"))


def _vectors(rows: int, seed: int, dim: int = DIM) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)


def make_model2vec(
    directory: Path,
    *,
    tokenizer: Tokenizers = "bert",
    dtype: Literal["float32", "float16", "int8", "float64"] = "float32",
    vocabulary_quantization: int | None = None,
    normalize: bool = True,
    max_length: int | None = 512,
    seed: int = 0,
) -> Path:
    """A model2vec checkpoint as `save_pretrained` writes it (quantized by model2vec itself)."""
    from model2vec import StaticModel
    from model2vec.model import quantize_model

    loaded = _tokenizer(tokenizer, directory.parent / f"{directory.name}-tokenizer")
    model = StaticModel(
        _vectors(loaded.get_vocab_size(), seed),
        loaded,
        normalize=normalize,
        max_length=max_length,
    )
    if vocabulary_quantization is not None or dtype != "float32":
        model = quantize_model(
            model,
            vocabulary_quantization=vocabulary_quantization,
            quantize_to=None if dtype == "float32" else dtype,
        )
    model.save_pretrained(directory)
    return directory


def make_distilled_model2vec(directory: Path, *, clusters: int = 32, seed: int = 6) -> Path:
    """A vocabulary-quantized model2vec checkpoint as `distill` leaves it: its per-token weights
    in float64 (as model2vec computes them), a row per cluster, not normalized."""
    from model2vec import StaticModel

    loaded = _tokenizer("xlmr", directory.parent / f"{directory.name}-tokenizer")
    rng = np.random.default_rng(seed)
    vocabulary = loaded.get_vocab_size()
    StaticModel(
        _vectors(clusters, seed),
        loaded,
        normalize=False,
        weights=rng.uniform(0.05, 2.0, vocabulary),  # float64
        token_mapping=rng.integers(0, clusters, vocabulary),
    ).save_pretrained(directory)
    return directory


def make_static_embedding(
    directory: Path,
    *,
    layout: Literal["saved", "published"] = "saved",
    normalize: bool = True,
    seed: int = 1,
) -> Path:
    """A sentence-transformers StaticEmbedding model: as `save()` writes it ("saved": the
    module at the root), or as static-retrieval-mrl-en-v1 is published ("published":
    `0_StaticEmbedding/`, prompts in config_sentence_transformers.json)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, StaticEmbedding

    loaded = _tokenizer("bert", directory)
    static = StaticEmbedding(loaded, embedding_weights=_vectors(loaded.get_vocab_size(), seed))
    modules = [static, Normalize()] if normalize else [static]
    prompts = {"query": QUERY_PROMPT, "document": ""} if layout == "published" else {}
    SentenceTransformer(modules=modules, prompts=prompts).save(str(directory))
    if layout == "published":
        folder = directory / "0_StaticEmbedding"
        folder.mkdir()
        for name in ("model.safetensors", "tokenizer.json"):
            shutil.move(directory / name, folder / name)
        listed = json.loads((directory / "modules.json").read_text())
        listed[0].update(path="0_StaticEmbedding")
        (directory / "modules.json").write_text(json.dumps(listed, indent=2))
    return directory


def model2vec_reference(directory: Path, texts: Sequence[str], **encode: Any) -> np.ndarray:
    """model2vec's own vectors (`StaticModel.encode`)."""
    from model2vec import StaticModel

    vectors: np.ndarray = StaticModel.from_pretrained(str(directory)).encode(list(texts), **encode)
    return vectors


def st_reference(directory: Path, texts: Sequence[str], **encode: Any) -> np.ndarray:
    """sentence-transformers' own vectors (`SentenceTransformer.encode`)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(directory), device="cpu")
    vectors: np.ndarray = model.encode(list(texts), convert_to_numpy=True, **encode)
    return vectors
