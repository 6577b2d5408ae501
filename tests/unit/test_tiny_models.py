"""The tiny model generators write loadable directories; their references agree with the libraries.

Each directory is loaded with the transformers Auto class of its kind (and with
sentence-transformers where the kind has a sentence-transformers layout); the float64 references
are checked against sentence-transformers' own float32 results, and for determinism.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file

from tests.tiny_models import (
    CLASSIFIER_LABELS,
    COLBERT_DIM,
    MULTILABEL_LABELS,
    TOKEN_LABELS,
    TOKENIZER_FILES,
    VOCAB_SIZE,
    classifier_reference_labels,
    classifier_reference_logits,
    classifier_reference_probs,
    colbert_reference_embeddings,
    colbert_reference_inputs,
    colbert_reference_scores,
    cross_encoder_reference_scores,
    make_classifier,
    make_colbert,
    make_cross_encoder,
    make_splade,
    minilm_path,
    splade_reference,
    splade_reference_vectors,
    token_classifier_reference,
)

PAIRS = [
    ("What is the capital of France?", "Paris is the capital of France."),
    ("What is the capital of France?", "Bananas are yellow."),
    ("hello", "world"),
    ("a", "The quick brown fox jumps over the lazy dog while the river keeps running."),
]
TEXTS = [
    "I love this!",
    "terrible, awful service",
    "The cat sat on the mat.",
    "John Smith lives in Paris and works in Berlin.",
    "x",
]
QUERY = "What is the capital of France?"
DOCUMENTS = [
    "Paris is the capital of France.",
    "Berlin, the capital of Germany, is a city of museums!",
    "bananas",
]


def files(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}


def read(directory: Path, name: str) -> Any:
    return json.loads((directory / name).read_text())


def assert_bert_config(directory: Path, architecture: str) -> dict[str, Any]:
    config: dict[str, Any] = read(directory, "config.json")
    assert config["architectures"] == [architecture]
    assert config["model_type"] == "bert"
    assert config["vocab_size"] == VOCAB_SIZE
    assert (config["hidden_size"], config["num_hidden_layers"]) == (32, 2)
    assert (config["num_attention_heads"], config["intermediate_size"]) == (2, 64)
    assert (config["max_position_embeddings"], config["type_vocab_size"]) == (512, 2)
    for name in TOKENIZER_FILES:
        assert (directory / name).read_bytes() == (minilm_path() / name).read_bytes(), name
    return config


# --- cross-encoder ----------------------------------------------------------------------------


def test_cross_encoder_layout(cross_encoder_dir: Path) -> None:
    assert files(cross_encoder_dir) == {
        "config.json",
        "model.safetensors",
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
        *TOKENIZER_FILES,
    }
    config = assert_bert_config(cross_encoder_dir, "BertForSequenceClassification")
    assert config["id2label"] == {"0": "LABEL_0"}
    st_config = read(cross_encoder_dir, "config_sentence_transformers.json")
    assert st_config["model_type"] == "CrossEncoder"
    assert st_config["activation_fn"] == "torch.nn.modules.activation.Sigmoid"
    (module,) = read(cross_encoder_dir, "modules.json")
    assert module["path"] == ""
    assert read(cross_encoder_dir, "sentence_bert_config.json")["module_output_name"] == "scores"


def test_cross_encoder_reference(cross_encoder_dir: Path) -> None:
    scores = cross_encoder_reference_scores(cross_encoder_dir, PAIRS)
    logits = cross_encoder_reference_scores(cross_encoder_dir, PAIRS, raw=True)
    assert scores.shape == logits.shape == (len(PAIRS),)
    assert scores.dtype == np.float32
    np.testing.assert_allclose(scores, 1 / (1 + np.exp(-logits.astype(np.float64))), rtol=1e-6)
    # Scores differ between inputs, and the float64 transformers logits agree with predict().
    assert np.ptp(logits) > 0.05
    f64 = classifier_reference_logits(cross_encoder_dir, PAIRS)
    assert f64.shape == (len(PAIRS), 1)
    np.testing.assert_allclose(logits, f64[:, 0], atol=1e-5)
    np.testing.assert_array_equal(scores, cross_encoder_reference_scores(cross_encoder_dir, PAIRS))


def test_cross_encoder_st4_layout_scores_the_same(cross_encoder_dir: Path, tmp_path: Path) -> None:
    directory = make_cross_encoder(tmp_path / "st4", layout="st4")
    assert files(directory) == {"config.json", "model.safetensors", *TOKENIZER_FILES}
    assert read(directory, "config.json")["sentence_transformers"]["activation_fn"] == (
        "torch.nn.modules.activation.Sigmoid"
    )
    np.testing.assert_array_equal(
        cross_encoder_reference_scores(directory, PAIRS),
        cross_encoder_reference_scores(cross_encoder_dir, PAIRS),
    )


def test_generation_is_deterministic(cross_encoder_dir: Path, tmp_path: Path) -> None:
    again = make_cross_encoder(tmp_path / "again")
    first = load_file(str(cross_encoder_dir / "model.safetensors"))
    second = load_file(str(again / "model.safetensors"))
    assert first.keys() == second.keys()
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


# --- sequence classifiers ---------------------------------------------------------------------


def test_classifier(classifier_dir: Path) -> None:
    from transformers import AutoModelForSequenceClassification

    config = assert_bert_config(classifier_dir, "BertForSequenceClassification")
    assert files(classifier_dir) == {"config.json", "model.safetensors", *TOKENIZER_FILES}
    assert config["id2label"] == {str(k): v for k, v in CLASSIFIER_LABELS.items()}
    model = AutoModelForSequenceClassification.from_pretrained(str(classifier_dir))
    assert model.config.num_labels == 3

    probs = classifier_reference_probs(classifier_dir, TEXTS)
    assert probs.shape == (len(TEXTS), 3)
    assert probs.dtype == np.float64
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(probs, classifier_reference_probs(classifier_dir, TEXTS))
    labels = classifier_reference_labels(classifier_dir, TEXTS)
    assert labels == [CLASSIFIER_LABELS[int(i)] for i in probs.argmax(axis=1)]
    assert len(set(labels)) > 1  # the seed is chosen so that the inputs do not all agree


def test_multilabel_classifier(multilabel_classifier_dir: Path) -> None:
    from transformers import AutoModelForSequenceClassification

    config = assert_bert_config(multilabel_classifier_dir, "BertForSequenceClassification")
    assert config["problem_type"] == "multi_label_classification"
    assert config["id2label"] == {str(k): v for k, v in MULTILABEL_LABELS.items()}
    AutoModelForSequenceClassification.from_pretrained(str(multilabel_classifier_dir))

    logits = classifier_reference_logits(multilabel_classifier_dir, TEXTS)
    probs = classifier_reference_probs(multilabel_classifier_dir, TEXTS)
    assert probs.shape == (len(TEXTS), 4)
    np.testing.assert_allclose(probs, 1 / (1 + np.exp(-logits)), rtol=1e-12)
    assert not np.allclose(probs.sum(axis=1), 1.0)  # sigmoid per label, not softmax
    assert len({int(n) for n in (probs > 0.5).sum(axis=1)}) > 1


# --- token classifier -------------------------------------------------------------------------


def test_token_classifier(token_classifier_dir: Path) -> None:
    from transformers import AutoModelForTokenClassification

    config = assert_bert_config(token_classifier_dir, "BertForTokenClassification")
    assert config["id2label"] == {str(k): v for k, v in TOKEN_LABELS.items()}
    AutoModelForTokenClassification.from_pretrained(str(token_classifier_dir))

    results = token_classifier_reference(token_classifier_dir, TEXTS)
    assert len(results) == len(TEXTS)
    for text, result in zip(TEXTS, results, strict=True):
        n = len(result.input_ids)
        assert result.logits.shape == result.probs.shape == (n, len(TOKEN_LABELS))
        assert len(result.tokens) == len(result.labels) == len(result.offsets) == n
        assert result.tokens[0] == "[CLS]" and result.tokens[-1] == "[SEP]"
        assert result.special == [True] + [False] * (n - 2) + [True]
        np.testing.assert_allclose(result.probs.sum(axis=1), 1.0, atol=1e-12)
        assert set(result.labels) <= set(TOKEN_LABELS.values())
        for (start, end), special in zip(result.offsets, result.special, strict=True):
            assert special or 0 <= start < end <= len(text)
    again = token_classifier_reference(token_classifier_dir, TEXTS)
    for a, b in zip(results, again, strict=True):
        np.testing.assert_array_equal(a.logits, b.logits)
    assert len({label for r in results for label in r.labels}) > 1


# --- ColBERT ----------------------------------------------------------------------------------


def test_colbert_layout(colbert_dir: Path) -> None:
    from transformers import AutoModel

    assert_bert_config(colbert_dir, "BertModel")
    assert files(colbert_dir) == {
        "config.json",
        "model.safetensors",
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
        "1_Dense/config.json",
        "1_Dense/model.safetensors",
        *TOKENIZER_FILES,
    }
    modules = read(colbert_dir, "modules.json")
    assert [(m["path"], m["type"]) for m in modules] == [
        ("", "sentence_transformers.models.Transformer"),
        ("1_Dense", "pylate.models.Dense.Dense"),
    ]
    dense = read(colbert_dir, "1_Dense/config.json")
    assert (dense["in_features"], dense["out_features"], dense["bias"]) == (32, COLBERT_DIM, False)
    weights = load_file(str(colbert_dir / "1_Dense" / "model.safetensors"))
    assert list(weights) == ["linear.weight"]
    assert weights["linear.weight"].shape == (COLBERT_DIM, 32)
    config = read(colbert_dir, "config_sentence_transformers.json")
    assert (config["query_prefix"], config["document_prefix"]) == ("[unused0]", "[unused1]")
    assert config["do_query_expansion"] is False
    assert config["skiplist_words"] == []
    AutoModel.from_pretrained(str(colbert_dir))


def test_colbert_inputs_insert_the_marker_after_cls(colbert_dir: Path) -> None:
    query = colbert_reference_inputs(colbert_dir, "hello world", is_query=True)
    document = colbert_reference_inputs(colbert_dir, "hello world", is_query=False)
    # [CLS] marker hello world [SEP]; [unused0] is id 1 and [unused1] id 2 in the BERT vocabulary.
    assert query.input_ids[:2] == [101, 1] and query.input_ids[-1] == 102
    assert document.input_ids[:2] == [101, 2] and document.input_ids[2:] == query.input_ids[2:]
    assert len(query.input_ids) == 5
    assert query.attention_mask == [1] * 5 and all(query.scored)


def test_colbert_reference(colbert_dir: Path) -> None:
    (query,) = colbert_reference_embeddings(colbert_dir, [QUERY], is_query=True)
    documents = colbert_reference_embeddings(colbert_dir, DOCUMENTS, is_query=False)
    query_tokens = colbert_reference_inputs(colbert_dir, QUERY, is_query=True).input_ids
    assert query.shape == (len(query_tokens), COLBERT_DIM)
    for text, vectors in zip(DOCUMENTS, documents, strict=True):
        tokens = colbert_reference_inputs(colbert_dir, text, is_query=False).input_ids
        assert vectors.shape == (len(tokens), COLBERT_DIM)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-12)
    scores = colbert_reference_scores(colbert_dir, QUERY, DOCUMENTS)
    assert scores.shape == (len(DOCUMENTS),) and scores.dtype == np.float64
    assert np.all(np.abs(scores) <= len(query) + 1e-9)
    np.testing.assert_array_equal(scores, colbert_reference_scores(colbert_dir, QUERY, DOCUMENTS))


def _st_colbert_scores(directory: Path) -> np.ndarray:
    from sentence_transformers import MultiVectorEncoder

    model = MultiVectorEncoder(str(directory), device="cpu")
    query = model.encode_query([QUERY])
    documents = model.encode_document(DOCUMENTS)
    return np.asarray(model.similarity(query, documents)[0].numpy(), dtype=np.float64)


def test_colbert_reference_matches_sentence_transformers(colbert_dir: Path) -> None:
    np.testing.assert_allclose(
        colbert_reference_scores(colbert_dir, QUERY, DOCUMENTS),
        _st_colbert_scores(colbert_dir),
        atol=1e-4,
    )


def test_colbert_with_query_expansion_and_skiplist(tmp_path: Path) -> None:
    directory = make_colbert(tmp_path / "colbert", query_expansion=True, skiplist=True)
    query = colbert_reference_inputs(directory, "hello world", is_query=True)
    assert len(query.input_ids) == 32 and query.input_ids[5:] == [103] * 27  # [MASK] padding
    assert query.attention_mask == [1] * 5 + [0] * 27 and all(query.scored)
    document = colbert_reference_inputs(directory, "hello, world!", is_query=False)
    assert document.scored == [True, True, True, False, True, False, True]
    np.testing.assert_allclose(
        colbert_reference_scores(directory, QUERY, DOCUMENTS),
        _st_colbert_scores(directory),
        atol=1e-4,
    )


# --- SPLADE -----------------------------------------------------------------------------------


def test_splade_layout(splade_dir: Path) -> None:
    from transformers import AutoModelForMaskedLM

    assert_bert_config(splade_dir, "BertForMaskedLM")
    assert files(splade_dir) == {
        "config.json",
        "model.safetensors",
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
        "1_SpladePooling/config.json",
        *TOKENIZER_FILES,
    }
    assert read(splade_dir, "config_sentence_transformers.json")["model_type"] == "SparseEncoder"
    assert [m["path"] for m in read(splade_dir, "modules.json")] == ["", "1_SpladePooling"]
    pooling = read(splade_dir, "1_SpladePooling/config.json")
    assert (pooling["pooling_strategy"], pooling["activation_function"]) == ("max", "relu")
    AutoModelForMaskedLM.from_pretrained(str(splade_dir))


def test_splade_reference(splade_dir: Path) -> None:
    vectors = splade_reference_vectors(splade_dir, TEXTS)
    assert vectors.shape == (len(TEXTS), VOCAB_SIZE) and vectors.dtype == np.float64
    assert np.all(vectors >= 0)
    sparse = splade_reference(splade_dir, TEXTS)
    for row, terms in zip(vectors, sparse, strict=True):
        assert 0 < len(terms) < VOCAB_SIZE // 20  # sparse, as trained SPLADE models are
        assert set(terms) == set(np.flatnonzero(row).tolist())
        assert all(value > 0 for value in terms.values())
    assert splade_reference(splade_dir, TEXTS) == sparse


@pytest.mark.parametrize("layout", ["st6", "st5"])
def test_splade_reference_matches_sentence_transformers(
    splade_dir: Path, tmp_path: Path, layout: str
) -> None:
    from sentence_transformers import SparseEncoder

    directory = splade_dir if layout == "st6" else make_splade(tmp_path / "st5", layout="st5")
    model = SparseEncoder(str(directory), device="cpu")
    encoded = model.encode(TEXTS, convert_to_tensor=True).to_dense().double().numpy()
    np.testing.assert_allclose(encoded, splade_reference_vectors(directory, TEXTS), atol=1e-5)


def test_classifier_generation_is_deterministic(classifier_dir: Path, tmp_path: Path) -> None:
    other = make_classifier(tmp_path / "again")
    np.testing.assert_array_equal(
        classifier_reference_logits(other, TEXTS),
        classifier_reference_logits(classifier_dir, TEXTS),
    )
