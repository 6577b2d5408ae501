"""The catalogue: `ZOO`, every model of the zoo with the hub id it imitates, its generator,
the kind poolserve must serve it as, the settings a user must give and a prompt to check."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.model_zoo.bert import (
    make_bge_small_en_v1_5,
    make_ms_marco_minilm_l6_v2,
    make_msmarco_distilbert_base_v4,
    make_multilingual_e5_small,
    make_mxbai_embed_large_v1,
    make_mxbai_embed_large_v1_truncated,
    make_snowflake_arctic_embed_m,
)
from tests.model_zoo.bge_m3 import make_bge_m3
from tests.model_zoo.gemma import make_bge_reranker_v2_gemma, make_embeddinggemma_300m
from tests.model_zoo.gte import make_gte_base_en_v1_5
from tests.model_zoo.jina import (
    make_jina_embeddings_v2_base_en,
    make_jina_reranker_v2_base_multilingual,
)
from tests.model_zoo.mistral import make_e5_mistral_7b_instruct
from tests.model_zoo.modernbert import make_gte_modernbert_base, make_modernbert_embed_base
from tests.model_zoo.mpnet import make_all_mpnet_base_v2
from tests.model_zoo.nomic import make_nomic_embed_text_v1_5
from tests.model_zoo.qwen2 import make_gte_qwen2_1_5b_instruct, make_stella_en_1_5b_v5
from tests.model_zoo.qwen3 import (
    make_qwen3_embedding_0_6b,
    make_qwen3_reranker_0_6b,
    make_qwen3_reranker_0_6b_seq_cls,
)
from tests.model_zoo.t5 import make_gtr_t5_base, make_sentence_t5_base
from tests.model_zoo.xlm_roberta import (
    make_bge_reranker_v2_m3,
    make_multilingual_e5_base,
    make_multilingual_e5_large_instruct,
)


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo: what to serve it as and how to check it."""

    name: str  # short served name, e.g. "all-mpnet-base-v2"
    imitates: str  # the hub id it imitates
    make: Callable[[Path], Path]
    kind: str  # poolserve kind expected: "embedding" | "cross_encoder" | ...
    settings: dict[str, Any]  # model-file keys a user must set beyond the defaults
    prompt_name: str | None  # a prompt the test should also check with, or None


_REMOTE = {"trust_remote_code": True}
_LLM_RERANKER = {"task": "cross_encoder"}


ZooRow = tuple[str, str, Callable[[Path], Path], str, dict[str, Any], str | None]


def _zoo(rows: Iterable[ZooRow]) -> tuple[ZooModel, ...]:
    return tuple(ZooModel(*row) for row in rows)


# fmt: off
ZOO: tuple[ZooModel, ...] = _zoo([
    ("all-mpnet-base-v2", "sentence-transformers/all-mpnet-base-v2",
     make_all_mpnet_base_v2, "embedding", {}, None),
    ("msmarco-distilbert-base-v4", "sentence-transformers/msmarco-distilbert-base-v4",
     make_msmarco_distilbert_base_v4, "embedding", {}, None),
    ("gtr-t5-base", "sentence-transformers/gtr-t5-base",
     make_gtr_t5_base, "embedding", {}, None),
    ("sentence-t5-base", "sentence-transformers/sentence-t5-base",
     make_sentence_t5_base, "embedding", {}, None),
    ("nomic-embed-text-v1.5", "nomic-ai/nomic-embed-text-v1.5",
     make_nomic_embed_text_v1_5, "embedding", _REMOTE, "search_query"),
    ("gte-base-en-v1.5", "Alibaba-NLP/gte-base-en-v1.5",
     make_gte_base_en_v1_5, "embedding", _REMOTE, None),
    ("jina-embeddings-v2-base-en", "jinaai/jina-embeddings-v2-base-en",
     make_jina_embeddings_v2_base_en, "embedding", _REMOTE, None),
    ("Qwen3-Embedding-0.6B", "Qwen/Qwen3-Embedding-0.6B",
     make_qwen3_embedding_0_6b, "embedding", {}, "query"),
    ("e5-mistral-7b-instruct", "intfloat/e5-mistral-7b-instruct",
     make_e5_mistral_7b_instruct, "embedding", {}, "web_search_query"),
    ("gte-Qwen2-1.5B-instruct", "Alibaba-NLP/gte-Qwen2-1.5B-instruct",
     make_gte_qwen2_1_5b_instruct, "embedding", {}, "query"),
    ("mxbai-embed-large-v1", "mixedbread-ai/mxbai-embed-large-v1",
     make_mxbai_embed_large_v1, "embedding", {}, "query"),
    ("bge-small-en-v1.5", "BAAI/bge-small-en-v1.5",
     make_bge_small_en_v1_5, "embedding", {}, None),
    ("multilingual-e5-small", "intfloat/multilingual-e5-small",
     make_multilingual_e5_small, "embedding", {}, "query"),
    ("multilingual-e5-base", "intfloat/multilingual-e5-base",
     make_multilingual_e5_base, "embedding", {}, "query"),
    ("multilingual-e5-large-instruct", "intfloat/multilingual-e5-large-instruct",
     make_multilingual_e5_large_instruct, "embedding", {}, "web_search_query"),
    ("snowflake-arctic-embed-m", "Snowflake/snowflake-arctic-embed-m",
     make_snowflake_arctic_embed_m, "embedding", {}, "query"),
    ("stella_en_1.5B_v5", "dunzhang/stella_en_1.5B_v5",
     make_stella_en_1_5b_v5, "embedding", {}, "s2p_query"),
    ("mxbai-embed-large-v1-truncated", "mixedbread-ai/mxbai-embed-large-v1",
     make_mxbai_embed_large_v1_truncated, "embedding", {}, "query"),
    ("gte-modernbert-base", "Alibaba-NLP/gte-modernbert-base",
     make_gte_modernbert_base, "embedding", {}, None),
    ("modernbert-embed-base", "nomic-ai/modernbert-embed-base",
     make_modernbert_embed_base, "embedding", {}, "query"),
    ("embeddinggemma-300m", "google/embeddinggemma-300m",
     make_embeddinggemma_300m, "embedding", {}, "query"),
    ("bge-m3", "BAAI/bge-m3",
     make_bge_m3, "embedding", {}, None),
    ("ms-marco-MiniLM-L6-v2", "cross-encoder/ms-marco-MiniLM-L6-v2",
     make_ms_marco_minilm_l6_v2, "cross_encoder", {}, None),
    ("bge-reranker-v2-m3", "BAAI/bge-reranker-v2-m3",
     make_bge_reranker_v2_m3, "cross_encoder", {}, None),
    ("Qwen3-Reranker-0.6B-seq-cls", "tomaarsen/Qwen3-Reranker-0.6B-seq-cls",
     make_qwen3_reranker_0_6b_seq_cls, "cross_encoder", {}, None),
    ("Qwen3-Reranker-0.6B", "Qwen/Qwen3-Reranker-0.6B",
     make_qwen3_reranker_0_6b, "cross_encoder", _LLM_RERANKER, None),
    ("bge-reranker-v2-gemma", "BAAI/bge-reranker-v2-gemma",
     make_bge_reranker_v2_gemma, "cross_encoder", _LLM_RERANKER, None),
    ("jina-reranker-v2-base-multilingual", "jinaai/jina-reranker-v2-base-multilingual",
     make_jina_reranker_v2_base_multilingual, "cross_encoder", _REMOTE, None),
])
# fmt: on
ZOO_BY_NAME: dict[str, ZooModel] = {model.name: model for model in ZOO}
