"""Tiny random checkpoints in the on-disk layouts of popular embedding models and rerankers.

Each `make_<name>(directory)` writes a 2-layer, 32-wide model (64-wide attention projections where
the architecture's head_dim asks for it, as Qwen3's) with seeded random weights in the files the
hub repository it imitates ships: config.json (its `architectures`, `model_type`, its own config
keys, `auto_map` and the custom code files where the real repository runs code of its own), the
weights in the real checkpoint's dtype and key prefix, the sentence-transformers files
(modules.json, sentence_bert_config.json, config_sentence_transformers.json with the real prompts,
1_Pooling, Dense folders, heads such as BGE-M3's colbert_linear.pt) and a tokenizer of the family's
type with its special tokens. `ZOO` (catalogue.py) lists them for the tests; `reference_embeddings`,
`reference_scores` and the `bge_m3_*` functions compute what a correct server must return, with
sentence-transformers (in float32) or with the published formula of the model card (in float64, one
input at a time), never with poolserve code.

Tokenizers that are not BERT's WordPiece are trained here, offline and deterministically, with the
`tokenizers` library on text every machine has: the METADATA (the README) of a fixed, sorted list
of pure-Python packages the project pins, the bundled all-MiniLM-L6-v2 README and a few lines
written in training.py. BPE training is deterministic; the `tokenizers` Unigram trainer is not (two
runs give other pieces), so the Unigram (SentencePiece-style) vocabularies of T5 and XLM-RoBERTa are
the pieces of a BPE trained with Metaspace, scored by how often that BPE uses them. The trained
model is then wrapped in the family's transformers class (Qwen2Tokenizer, GemmaTokenizer,
LlamaTokenizer, T5Tokenizer, XLMRobertaTokenizer, MPNetTokenizer) so that tokenizer.json holds that
class's normalizer, pre-tokenizer, decoder and post-processor, and tokenizer_config.json /
special_tokens_map.json are written as the hub repositories carry them (transformers 4.x style,
with `added_tokens_decoder`). transformers 5 rebuilds the pipeline of those classes from the class
and takes only the vocabulary, merges and post-processor from tokenizer.json, so a server that
reads tokenizer.json with `tokenizers` directly and one that uses `AutoTokenizer` agree on these
files.

Weights are drawn with `initializer_range` 0.2 (tiny_models.py says why) and stored in the dtype
the real checkpoint has (bfloat16 for Qwen3, float16 for e5-mistral and the T5 models); config.json
is rewritten in the transformers 4.x form hub repositories have (`torch_dtype`, `rope_theta`,
`rope_local_base_freq`, `global_rope_theta`, ...) and read back with `AutoConfig` to check that
transformers 5 sees the configuration the weights were made for. transformers 5 loads a model in
the dtype its config.json names unless told otherwise (`dtype="auto"` is the default), so the
references pass `dtype=torch.float32` explicitly.

The modules: one per model family (bert, mpnet, t5, xlm_roberta, bge_m3, qwen3, qwen2, mistral,
modernbert, gemma, nomic, gte, jina), the code shipped with trust_remote_code models
(remote_code/), tokenizer training (training), tokenizer files (tokenizer_files), weights and
config.json (weights), sentence-transformers files (st_files), shared constants (constants), the
references (references, bge_m3) and the catalogue (catalogue). This package re-exports the
generators, the catalogue and the references.
"""

from __future__ import annotations

from tests.model_zoo.bert import (
    make_bge_small_en_v1_5,
    make_ms_marco_minilm_l6_v2,
    make_msmarco_distilbert_base_v4,
    make_multilingual_e5_small,
    make_mxbai_embed_large_v1,
    make_mxbai_embed_large_v1_truncated,
    make_snowflake_arctic_embed_m,
)
from tests.model_zoo.bge_m3 import (
    M3Output,
    M3Scores,
    bge_m3_colbert_score,
    bge_m3_lexical_score,
    bge_m3_reference,
    bge_m3_reference_colbert_vecs,
    bge_m3_reference_dense,
    bge_m3_reference_lexical_weights,
    bge_m3_reference_scores,
    make_bge_m3,
)
from tests.model_zoo.catalogue import ZOO, ZOO_BY_NAME, ZooModel, ZooRow
from tests.model_zoo.constants import HIDDEN, MATRYOSHKA_TRUNCATE_DIM
from tests.model_zoo.gemma import (
    EMBEDDINGGEMMA_DENSE_DIM,
    make_bge_reranker_v2_gemma,
    make_embeddinggemma_300m,
)
from tests.model_zoo.gte import make_gte_base_en_v1_5
from tests.model_zoo.jina import (
    make_jina_embeddings_v2_base_en,
    make_jina_reranker_v2_base_multilingual,
)
from tests.model_zoo.mistral import make_e5_mistral_7b_instruct
from tests.model_zoo.modernbert import make_gte_modernbert_base, make_modernbert_embed_base
from tests.model_zoo.mpnet import make_all_mpnet_base_v2
from tests.model_zoo.nomic import make_nomic_embed_text_v1_5
from tests.model_zoo.qwen2 import (
    STELLA_DENSE_DIM,
    make_gte_qwen2_1_5b_instruct,
    make_stella_en_1_5b_v5,
)
from tests.model_zoo.qwen3 import (
    make_qwen3_embedding_0_6b,
    make_qwen3_reranker_0_6b,
    make_qwen3_reranker_0_6b_seq_cls,
)
from tests.model_zoo.references import (
    bge_reranker_gemma_reference_scores,
    cross_encoder,
    qwen3_reranker_reference_scores,
    qwen3_reranker_seq_cls_pairs,
    reference_embeddings,
    reference_scores,
    sentence_transformer,
)
from tests.model_zoo.t5 import make_gtr_t5_base, make_sentence_t5_base
from tests.model_zoo.xlm_roberta import (
    make_bge_reranker_v2_m3,
    make_multilingual_e5_base,
    make_multilingual_e5_large_instruct,
)

__all__ = [
    "EMBEDDINGGEMMA_DENSE_DIM",
    "HIDDEN",
    "MATRYOSHKA_TRUNCATE_DIM",
    "STELLA_DENSE_DIM",
    "ZOO",
    "ZOO_BY_NAME",
    "M3Output",
    "M3Scores",
    "ZooModel",
    "ZooRow",
    "bge_m3_colbert_score",
    "bge_m3_lexical_score",
    "bge_m3_reference",
    "bge_m3_reference_colbert_vecs",
    "bge_m3_reference_dense",
    "bge_m3_reference_lexical_weights",
    "bge_m3_reference_scores",
    "bge_reranker_gemma_reference_scores",
    "cross_encoder",
    "make_all_mpnet_base_v2",
    "make_bge_m3",
    "make_bge_reranker_v2_gemma",
    "make_bge_reranker_v2_m3",
    "make_bge_small_en_v1_5",
    "make_e5_mistral_7b_instruct",
    "make_embeddinggemma_300m",
    "make_gte_base_en_v1_5",
    "make_gte_modernbert_base",
    "make_gte_qwen2_1_5b_instruct",
    "make_gtr_t5_base",
    "make_jina_embeddings_v2_base_en",
    "make_jina_reranker_v2_base_multilingual",
    "make_modernbert_embed_base",
    "make_ms_marco_minilm_l6_v2",
    "make_msmarco_distilbert_base_v4",
    "make_multilingual_e5_base",
    "make_multilingual_e5_large_instruct",
    "make_multilingual_e5_small",
    "make_mxbai_embed_large_v1",
    "make_mxbai_embed_large_v1_truncated",
    "make_nomic_embed_text_v1_5",
    "make_qwen3_embedding_0_6b",
    "make_qwen3_reranker_0_6b",
    "make_qwen3_reranker_0_6b_seq_cls",
    "make_sentence_t5_base",
    "make_snowflake_arctic_embed_m",
    "make_stella_en_1_5b_v5",
    "qwen3_reranker_reference_scores",
    "qwen3_reranker_seq_cls_pairs",
    "reference_embeddings",
    "reference_scores",
    "sentence_transformer",
]
