"""References: what a correct server must return for the zoo's models, computed with
sentence-transformers (float32) or with the model cards' formulas (float64, one input at a time),
never with poolserve code. BGE-M3's formulas are in bge_m3.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tests.model_zoo.constants import (
    BGE_GEMMA_MAX_LENGTH,
    BGE_GEMMA_PROMPT,
    BGE_GEMMA_SEPARATOR,
    QWEN3_RERANKER_INSTRUCTION,
    QWEN3_RERANKER_MAX_LENGTH,
    QWEN3_RERANKER_PREFIX,
    QWEN3_RERANKER_SUFFIX,
)

if TYPE_CHECKING:
    from tests.model_zoo.catalogue import ZooModel


FP32 = torch.float32


def load_tokenizer(directory: Path) -> Any:
    """`AutoTokenizer.from_pretrained(directory)`."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


def load_float64(auto_class: Any, directory: Path, **kwargs: Any) -> Any:
    """A transformers model in float64 (loaded in float32 first: `dtype="auto"` would take the
    checkpoint's bfloat16 / float16)."""
    return auto_class.from_pretrained(str(directory), dtype=FP32, **kwargs).double().eval()


def _trusts(model: ZooModel) -> bool:
    return bool(model.settings.get("trust_remote_code"))


def sentence_transformer(directory: Path, *, trust_remote_code: bool = False) -> Any:
    """`SentenceTransformer(directory)` on the CPU in float32, as the references use it."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(
        str(directory),
        device="cpu",
        trust_remote_code=trust_remote_code,
        model_kwargs={"dtype": FP32},
    )


def cross_encoder(directory: Path, *, trust_remote_code: bool = False) -> Any:
    """`CrossEncoder(directory)` on the CPU in float32, as the references use it."""
    from sentence_transformers import CrossEncoder

    return CrossEncoder(
        str(directory),
        device="cpu",
        trust_remote_code=trust_remote_code,
        model_kwargs={"dtype": FP32},
    )


def reference_embeddings(
    model: ZooModel,
    directory: Path,
    texts: Sequence[str],
    *,
    prompt_name: str | None = None,
) -> np.ndarray:
    """`SentenceTransformer(directory).encode(texts, prompt_name=...)` in float32, [n, dim]:
    the model's own modules (pooling, Dense, Normalize) and its truncate_dim, nothing more."""
    if model.kind != "embedding":
        raise ValueError(f"{model.name} is a {model.kind} model, not an embedding model")
    encoder = sentence_transformer(directory, trust_remote_code=_trusts(model))
    vectors = encoder.encode(
        list(texts), prompt_name=prompt_name, convert_to_numpy=True, batch_size=16
    )
    return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)


def reference_scores(
    model: ZooModel, directory: Path, query: str, documents: Sequence[str]
) -> np.ndarray:
    """What a correct server returns for `query` against each document, shape [n]:

    - cross-encoders (sequence classification): `CrossEncoder(directory).predict`, float32, with
      the model's activation (sigmoid for one label);
    - Qwen3-Reranker-0.6B-seq-cls: the same on the pairs its card builds
      (`qwen3_reranker_seq_cls_pairs`);
    - Qwen3-Reranker-0.6B: the card's formula, float64 (`qwen3_reranker_reference_scores`);
    - bge-reranker-v2-gemma: FlagLLMReranker's raw "Yes" logit, float64 (no sigmoid);
    - embedding models: the cosine similarity of the query's and each document's reference
      embedding (no prompt), float32.
    """
    if model.kind == "embedding":
        vectors = reference_embeddings(model, directory, [query, *documents]).astype(np.float64)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.asarray(vectors[1:] @ vectors[0], dtype=np.float32)
    if model.name == "Qwen3-Reranker-0.6B":
        return qwen3_reranker_reference_scores(directory, query, documents)
    if model.name == "bge-reranker-v2-gemma":
        return bge_reranker_gemma_reference_scores(directory, query, documents)
    if model.name == "Qwen3-Reranker-0.6B-seq-cls":
        pairs = qwen3_reranker_seq_cls_pairs(query, documents)
    else:
        pairs = [(query, document) for document in documents]
    scores = cross_encoder(directory, trust_remote_code=_trusts(model)).predict(
        pairs, batch_size=16, convert_to_numpy=True
    )
    return np.asarray(scores, dtype=np.float32).reshape(len(documents))


def qwen3_reranker_seq_cls_pairs(
    query: str, documents: Sequence[str], *, instruction: str = QWEN3_RERANKER_INSTRUCTION
) -> list[tuple[str, str]]:
    """The (query, document) texts tomaarsen/Qwen3-Reranker-0.6B-seq-cls's card passes to
    `CrossEncoder.predict`: the chat prefix, instruction and query as the first text, the
    document and the chat suffix as the second (Qwen's tokenizer joins a pair with nothing)."""
    first = f"{QWEN3_RERANKER_PREFIX}<Instruct>: {instruction}\n<Query>: {query}\n"
    return [(first, f"<Document>: {document}{QWEN3_RERANKER_SUFFIX}") for document in documents]


def qwen3_reranker_reference_scores(
    directory: Path,
    query: str,
    documents: Sequence[str],
    *,
    instruction: str = QWEN3_RERANKER_INSTRUCTION,
) -> np.ndarray:
    """Qwen3-Reranker's model card, float64, one pair at a time: ids = prefix tokens (no special
    tokens) + tokenizer("<Instruct>: {instruction}\\n<Query>: {query}\\n<Document>: {doc}")
    (truncated to 8192 minus prefix and suffix) + suffix tokens; score = softmax([logit "no",
    logit "yes"])[1] at the last position."""
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(directory)
    model = load_float64(AutoModelForCausalLM, directory)
    prefix = tokenizer.encode(QWEN3_RERANKER_PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(QWEN3_RERANKER_SUFFIX, add_special_tokens=False)
    yes = tokenizer.convert_tokens_to_ids("yes")
    no = tokenizer.convert_tokens_to_ids("no")
    budget = QWEN3_RERANKER_MAX_LENGTH - len(prefix) - len(suffix)
    scores = []
    with torch.no_grad():
        for document in documents:
            text = f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
            body = tokenizer(text, truncation="longest_first", max_length=budget)["input_ids"]
            ids = prefix + list(body) + suffix
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            pair = torch.stack([logits[no], logits[yes]])
            scores.append(float(torch.softmax(pair, dim=0)[1]))
    return np.asarray(scores, dtype=np.float64)


def bge_reranker_gemma_reference_scores(
    directory: Path,
    query: str,
    documents: Sequence[str],
    *,
    max_length: int = BGE_GEMMA_MAX_LENGTH,
) -> np.ndarray:
    """FlagEmbedding's FlagLLMReranker.compute_score, float64, one pair at a time: ids = [<bos>]
    + tokens of "A: {query}" (at most 3/4 of max_length) + tokens of "\\n" + tokens of
    "B: {passage}" (the pair cut to max_length from the passage's end) + "\\n" + the prompt's
    tokens, no special tokens anywhere else; the score is the raw logit of "Yes" (the first token
    of tokenizer("Yes")) at the last position. FlagEmbedding's normalize=True would apply a
    sigmoid; this returns the logit."""
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(directory)
    model = load_float64(AutoModelForCausalLM, directory)

    def encode(text: str, limit: int | None = None) -> list[int]:
        options: dict[str, Any] = {"truncation": True, "max_length": limit} if limit else {}
        return list(tokenizer(text, add_special_tokens=False, **options)["input_ids"])

    prompt = encode(BGE_GEMMA_PROMPT)
    separator = encode(BGE_GEMMA_SEPARATOR)
    yes = encode("Yes")[0]
    scores = []
    with torch.no_grad():
        for document in documents:
            first = [tokenizer.bos_token_id, *encode(f"A: {query}", max_length * 3 // 4)]
            second = separator + encode(f"B: {document}", max_length)
            overflow = len(first) + len(second) - max_length
            if overflow > 0:
                second = second[: len(second) - overflow]
            ids = first + second + separator + prompt
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            scores.append(float(logits[yes]))
    return np.asarray(scores, dtype=np.float64)
