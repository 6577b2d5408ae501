"""BGE-M3: the checkpoint (XLMRobertaModel with colbert_linear.pt and sparse_linear.pt) and
FlagEmbedding's BGEM3FlagModel formulas for its dense, lexical and multi-vector outputs and
scores."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tests.model_zoo.constants import BGE_M3_MAX_LENGTH, BGE_M3_WEIGHTS, HIDDEN
from tests.model_zoo.references import load_float64, load_tokenizer
from tests.model_zoo.st_files import st_versions, write_pooling, write_st
from tests.model_zoo.tokenizer_files import write_xlmr_tokenizer
from tests.model_zoo.weights import save_model, seed_torch
from tests.model_zoo.xlm_roberta import xlmr_config


def make_bge_m3(directory: Path) -> Path:
    """BAAI/bge-m3: XLMRobertaModel (max_position_embeddings 8194), XLM-RoBERTa Unigram tokenizer
    (model_max_length 8192), Transformer + Pooling(cls) + Normalize, max_seq_length 8192, and in
    the model root, as the real repository ships them, colbert_linear.pt (torch.save of a
    Linear(hidden, hidden) state dict: weight, bias) and sparse_linear.pt (Linear(hidden, 1))."""
    from transformers import XLMRobertaModel

    size = write_xlmr_tokenizer(directory, model_max_length=BGE_M3_MAX_LENGTH)
    seed_torch(21)
    save_model(
        XLMRobertaModel(xlmr_config(size, max_position_embeddings=BGE_M3_MAX_LENGTH + 2)),
        directory,
        dtype=torch.float32,
        transformers_version="4.33.0",
    )
    colbert = torch.nn.Linear(HIDDEN, HIDDEN)
    sparse = torch.nn.Linear(HIDDEN, 1)
    torch.save(colbert.state_dict(), directory / "colbert_linear.pt")
    torch.save(sparse.state_dict(), directory / "sparse_linear.pt")
    write_st(
        directory,
        [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Normalize", "Normalize")],
        max_seq_length=BGE_M3_MAX_LENGTH,
        st_config=st_versions("2.2.2", "4.33.0", "2.1.2+cu121"),
    )
    write_pooling(directory, HIDDEN, "cls", legacy=True)
    return directory


@dataclass(frozen=True)
class M3Output:
    """BGE-M3's three outputs for one text (FlagEmbedding's BGEM3FlagModel.encode), float64."""

    dense: np.ndarray  # [hidden]: the CLS hidden state, L2-normalised
    lexical_weights: dict[int, float]  # token id -> max relu(sparse_linear) over its occurrences
    colbert_vecs: np.ndarray  # [tokens - 1, hidden]: colbert_linear of every token after CLS


def bge_m3_reference(directory: Path, texts: Sequence[str]) -> list[M3Output]:
    """FlagEmbedding's BGEM3FlagModel formulas, float64, one text at a time (truncated to 8192):
    dense = normalize(h[CLS]); token weights = relu(sparse_linear(h)), kept per token id as the
    maximum over its occurrences when > 0, skipping the cls, eos, pad and unk ids (FlagEmbedding
    keys them by str(id); here by int); colbert = normalize(colbert_linear(h[1:])) per row (the
    final </s> included)."""
    from transformers import AutoModel

    tokenizer = load_tokenizer(directory)
    model = load_float64(AutoModel, directory)
    colbert = {k: v.double() for k, v in torch.load(directory / "colbert_linear.pt").items()}
    sparse = {k: v.double() for k, v in torch.load(directory / "sparse_linear.pt").items()}
    unused = {
        tokenizer.cls_token_id,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
        tokenizer.unk_token_id,
    }
    outputs = []
    with torch.no_grad():
        for text in texts:
            encoded = tokenizer(
                text, truncation=True, max_length=BGE_M3_MAX_LENGTH, return_tensors="pt"
            )
            hidden = model(**encoded).last_hidden_state[0]
            dense = hidden[0] / hidden[0].norm()
            weights = torch.relu(hidden @ sparse["weight"].T + sparse["bias"])[:, 0]
            lexical: dict[int, float] = {}
            for token, weight in zip(
                encoded["input_ids"][0].tolist(), weights.tolist(), strict=True
            ):
                if token not in unused and weight > 0 and weight > lexical.get(token, 0.0):
                    lexical[int(token)] = float(weight)
            vectors = hidden[1:] @ colbert["weight"].T + colbert["bias"]
            vectors = vectors / vectors.norm(dim=-1, keepdim=True)
            outputs.append(M3Output(dense.numpy(), lexical, vectors.numpy()))
    return outputs


def bge_m3_reference_dense(directory: Path, texts: Sequence[str]) -> np.ndarray:
    """[n, hidden] float64: BGE-M3's dense vectors."""
    return np.stack([output.dense for output in bge_m3_reference(directory, texts)])


def bge_m3_reference_lexical_weights(
    directory: Path, texts: Sequence[str]
) -> list[dict[int, float]]:
    """BGE-M3's lexical weights of each text, {token id: weight}."""
    return [output.lexical_weights for output in bge_m3_reference(directory, texts)]


def bge_m3_reference_colbert_vecs(directory: Path, texts: Sequence[str]) -> list[np.ndarray]:
    """BGE-M3's multi-vector output of each text, [tokens - 1, hidden] float64."""
    return [output.colbert_vecs for output in bge_m3_reference(directory, texts)]


def bge_m3_lexical_score(query: Mapping[int, float], passage: Mapping[int, float]) -> float:
    """FlagEmbedding's compute_lexical_matching_score: sum over shared ids of q_w * p_w."""
    return float(
        sum(weight * passage[token] for token, weight in query.items() if token in passage)
    )


def bge_m3_colbert_score(query: np.ndarray, passage: np.ndarray) -> float:
    """FlagEmbedding's colbert_score: the mean over query vectors of the best dot product."""
    return float((query @ passage.T).max(axis=1).sum() / query.shape[0])


@dataclass(frozen=True)
class M3Scores:
    """BGE-M3's scores of one query against each passage (float64, shape [n] each)."""

    dense: np.ndarray
    sparse: np.ndarray
    colbert: np.ndarray
    sparse_dense: np.ndarray  # FlagEmbedding's "sparse+dense"
    m3: np.ndarray  # FlagEmbedding's "colbert+sparse+dense"


def bge_m3_reference_scores(
    directory: Path,
    query: str,
    passages: Sequence[str],
    *,
    weights: tuple[float, float, float] = BGE_M3_WEIGHTS,
) -> M3Scores:
    """BGEM3FlagModel.compute_score with weights_for_different_modes (dense, sparse, colbert),
    default [0.4, 0.2, 0.4]: dense = q . p, sparse = the lexical matching score, colbert = the
    mean MaxSim; sparse+dense = (w_s sparse + w_d dense) / (w_s + w_d); m3 = (w_d dense + w_s
    sparse + w_c colbert) / (w_d + w_s + w_c)."""
    q, *ps = bge_m3_reference(directory, [query, *passages])
    dense = np.asarray([float(q.dense @ p.dense) for p in ps])
    sparse = np.asarray([bge_m3_lexical_score(q.lexical_weights, p.lexical_weights) for p in ps])
    colbert = np.asarray([bge_m3_colbert_score(q.colbert_vecs, p.colbert_vecs) for p in ps])
    w_dense, w_sparse, w_colbert = weights
    return M3Scores(
        dense=dense,
        sparse=sparse,
        colbert=colbert,
        sparse_dense=(w_sparse * sparse + w_dense * dense) / (w_sparse + w_dense),
        m3=(w_dense * dense + w_sparse * sparse + w_colbert * colbert)
        / (w_dense + w_sparse + w_colbert),
    )


# --- catalogue ----------------------------------------------------------------------------------
