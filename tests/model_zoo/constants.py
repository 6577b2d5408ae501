"""The zoo's shared constants: model sizes, the sentence-transformers module prefix, and the
prompts, chat template and reranker formats the imitated repositories and model cards carry."""

from __future__ import annotations

HIDDEN = 32
INTERMEDIATE = 64
LAYERS = 2
TRAINED_VOCAB = 4000  # the BPE vocabularies trained here (specials and byte tokens included)
UNIGRAM_PIECES = 3000  # the pieces of the T5 / XLM-RoBERTa Unigram vocabularies
BERT_VOCAB = 30522  # bert-base-uncased's WordPiece vocabulary, as the bundled MiniLM ships it
MATRYOSHKA_TRUNCATE_DIM = (
    16  # config_sentence_transformers.json's truncate_dim of the copy of mxbai
)
BIG_MODEL_MAX_LENGTH = 1000000000000000019884624838656  # transformers' VERY_LARGE_INTEGER

ST_MODULES = "sentence_transformers.models."
IDENTITY = "torch.nn.modules.linear.Identity"

# The ChatML markup Qwen's chat templates write for plain messages (roles, <|im_start|>,
# <|im_end|>), with the generation prompt; a conversation must not be empty.
CHATML_TEMPLATE = (
    "{%- if not messages %}{{ raise_exception('the conversation is empty') }}{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

# Qwen3-Reranker's model card (https://huggingface.co/Qwen/Qwen3-Reranker-0.6B), verbatim.
QWEN3_RERANKER_PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and "
    'the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
    "<|im_start|>user\n"
)
QWEN3_RERANKER_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
QWEN3_RERANKER_INSTRUCTION = (
    "Given a web search query, retrieve relevant passages that answer the query"
)
QWEN3_RERANKER_MAX_LENGTH = 8192
# FlagEmbedding's FlagLLMReranker (bge-reranker-v2-gemma), its defaults.
BGE_GEMMA_PROMPT = (
    "Given a query A and a passage B, determine whether the passage contains an answer to the "
    "query by providing a prediction of either 'Yes' or 'No'."
)
BGE_GEMMA_SEPARATOR = "\n"
BGE_GEMMA_MAX_LENGTH = 512
# FlagEmbedding's BGEM3FlagModel.compute_score default weights_for_different_modes.
BGE_M3_WEIGHTS = (0.4, 0.2, 0.4)  # dense, sparse, colbert
BGE_M3_MAX_LENGTH = 8192

QWEN3_EMBEDDING_PROMPTS = {
    "query": "Instruct: Given a web search query, retrieve relevant passages that answer the query"
    "\nQuery:",
    "document": "",
}
E5_MISTRAL_PROMPTS = {
    "web_search_query": "Instruct: Given a web search query, retrieve relevant passages that "
    "answer the query\nQuery: ",
    "sts_query": "Instruct: Retrieve semantically similar text.\nQuery: ",
    "summarization_query": "Instruct: Given a news summary, retrieve other semantically similar "
    "summaries\nQuery: ",
    "bitext_query": "Instruct: Retrieve parallel sentences.\nQuery: ",
}
GTE_QWEN2_PROMPTS = {
    "query": "Instruct: Given a web search query, retrieve relevant passages that answer the "
    "query\nQuery: ",
}
NOMIC_PROMPTS = {
    "search_query": "search_query: ",
    "search_document": "search_document: ",
    "classification": "classification: ",
    "clustering": "clustering: ",
}
RETRIEVAL_QUERY_PROMPT = "Represent this sentence for searching relevant passages: "
E5_PROMPTS = {"query": "query: ", "passage": "passage: "}
STELLA_PROMPTS = {
    "s2p_query": "Instruct: Given a web search query, retrieve relevant passages that answer the "
    "query.\nQuery: ",
    "s2s_query": "Instruct: Retrieve semantically similar text.\nQuery: ",
}
MODERNBERT_EMBED_PROMPTS = {"query": "search_query: ", "document": "search_document: "}
EMBEDDINGGEMMA_PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
    "BitextMining": "task: search result | query: ",
    "Clustering": "task: clustering | query: ",
    "Classification": "task: classification | query: ",
    "InstructionRetrieval": "task: code retrieval | query: ",
    "MultilabelClassification": "task: classification | query: ",
    "PairClassification": "task: sentence similarity | query: ",
    "Reranking": "task: search result | query: ",
    "Retrieval": "task: search result | query: ",
    "Retrieval-query": "task: search result | query: ",
    "Retrieval-document": "title: none | text: ",
    "STS": "task: sentence similarity | query: ",
    "Summarization": "task: summarization | query: ",
}
