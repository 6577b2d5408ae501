"""text-embeddings-inference's endpoints (`/embed`, `/embed_all`, `/predict`, `/similarity`,
`/embed_sparse`, `/info`, and `POST /`, which the Hugging Face `InferenceClient` calls), over
the same tasks, declared; their errors take TEI's shape, `{"error", "error_type"}`. TEI's shape
of the rerank paths is declared here too (beside the others', `apis/rerank.py`); its
`/tokenize` shape is served by `/tokenize` (`apis/admin.py`)."""

from __future__ import annotations

from functools import partial
from typing import Any

from poolserve.apis.declarations import (
    Call,
    Endpoint,
    Inputs,
    Served,
    classifiers,
    embedders,
    scorers,
    token_embedders,
)
from poolserve.apis.rerank import PATHS as RERANK_PATHS
from poolserve.apis.tei.answers import (
    TEI_ERRORS,
    SparseResponse,
    TeiEmbedResponse,
    TeiPredictResponse,
    TeiRerankResponse,
    TeiSimilarityResponse,
    predictions_body,
    rerank_body,
    similarity_body,
    sparse_body,
    token_vectors_body,
    vectors_body,
)
from poolserve.apis.tei.requests import (
    SparseEmbedRequest,
    TeiEmbedAllRequest,
    TeiEmbedRequest,
    TeiPredictRequest,
    TeiRerankRequest,
    TeiSimilarityRequest,
)
from poolserve.engine.context import PoolingOptions
from poolserve.errors import InvalidRequestError
from poolserve.service.model_service import ModelService
from poolserve.serving.serving_step import Vectors
from poolserve.tasks.classify import ClassifyRequest
from poolserve.tasks.embed import EmbedRequest
from poolserve.tasks.pooling import PoolingRequest
from poolserve.tasks.score import ScoreRequest, pair_up
from poolserve.tasks.task_set import TaskSet

# -- the endpoints -------------------------------------------------------------------------------

TRUNCATE = "`truncate: true`"


def _texts(inputs: str | list[str]) -> list[str]:
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not texts:
        raise InvalidRequestError("inputs is empty; send at least one text", param="inputs")
    return texts


def _prompted(service: ModelService, prompt_name: str | None, inputs: str | list[str]) -> list[str]:
    """The texts with the named prompt put before each, as text-embeddings-inference does on
    its token and sparse routes (none unless asked for: these routes never put the model's
    default prompt)."""
    prompt = service.tasks.prompts.resolve(prompt_name, None) if prompt_name else None
    texts = _texts(inputs)
    return texts if prompt is None else [prompt + text for text in texts]


def _count(wire: Any) -> int:
    return 1 if isinstance(wire.inputs, str) else len(wire.inputs)


def embed_served(call: Call[TeiEmbedRequest]) -> Served:
    wire, service = call.wire, call.service
    embed = service.tasks.embed
    assert embed is not None  # model_for chose a model that serves this route
    params = service.pooling_params(
        PoolingOptions(
            normalize=wire.normalize,
            dimensions=wire.dimensions,
            truncate_prompt_tokens=-1 if wire.truncate else None,
            truncation_side=wire.side(),
        )
    )
    prompt = service.tasks.prompts.resolve(wire.prompt_name, None)
    long_input = service.long_input if wire.truncate is None else "error"
    internal = EmbedRequest(_texts(wire.inputs), prompt, long_input)
    return Served(embed, internal, params, vectors_body, wire.request_timeout, vectors=Vectors())


def embed_all_served(call: Call[TeiEmbedAllRequest]) -> Served:
    wire, service = call.wire, call.service
    params = service.pooling_params(
        PoolingOptions(
            normalize=False,
            truncate_prompt_tokens=-1 if wire.truncate else None,
            truncation_side=wire.side(),
        )
    )
    internal = PoolingRequest(_prompted(service, wire.prompt_name, wire.inputs), "token_embed")
    return Served(
        service.tasks.pooling,
        internal,
        params,
        token_vectors_body,
        wire.request_timeout,
        vectors=Vectors("token_embed"),
    )


def predict_served(call: Call[TeiPredictRequest], *, nested: bool) -> Served:
    wire, service = call.wire, call.service
    parameters = wire.parameters
    raw = wire.raw_scores or (parameters is not None and parameters.function_to_apply == "none")
    asked = parameters.function_to_apply if parameters is not None else None
    own = service.tasks.classify.classifier.activation if service.tasks.classify else None
    if asked in ("sigmoid", "softmax") and own is not None and asked != own:
        raise InvalidRequestError(
            f"this model's scores come through {own}, not {asked}: leave function_to_apply "
            'out (or pass it as "none" for the raw logits)',
            param="parameters.function_to_apply",
        )
    params = service.pooling_params(
        PoolingOptions(
            use_activation=not raw,
            truncate_prompt_tokens=-1 if wire.truncate else None,
            truncation_side=wire.side(),
        )
    )
    top_k = parameters.top_k if parameters is not None else None
    single = isinstance(wire.inputs, str) and not nested
    inputs = [wire.inputs] if isinstance(wire.inputs, str) else wire.inputs
    if not inputs:
        raise InvalidRequestError(
            "inputs is empty; send a text, a list of texts or of [text, text] pairs",
            param="inputs",
        )
    pairs = [item for item in inputs if isinstance(item, list)]
    if pairs:  # the schema allows texts or pairs, never a mix
        return _predict_pairs(service, wire, pairs, params)
    task = service.tasks.classify
    if task is None and nested:  # POST / served for another model of the server
        raise InvalidRequestError(
            "POST / serves embedding models and classifiers; the first model is "
            f"{service.kind}: use /pooling"
        )
    if task is None:
        raise InvalidRequestError(f"/predict needs a classifier; this is {service.kind}")
    encode = partial(predictions_body, labels=task.classifier.labels, top_k=top_k, single=single)
    internal = ClassifyRequest([text for text in inputs if isinstance(text, str)])
    return Served(task, internal, params, encode, wire.request_timeout)


def _predict_pairs(
    service: ModelService, wire: TeiPredictRequest, pairs: list[list[str]], params: Any
) -> Served:
    """[text, text] pairs through a cross-encoder: one score each, labelled."""
    task = service.tasks.score
    if service.kind != "cross_encoder" or task is None or service.tasks.classify is None:
        raise InvalidRequestError(
            "[text, text] pairs need a cross-encoder; send texts", param="inputs"
        )
    queries, documents = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
    internal = ScoreRequest(
        queries,
        documents,
        pair_up(len(queries), len(documents)),
        names=("inputs[{}][0]", "inputs[{}][1]"),
    )
    encode = partial(
        predictions_body,
        labels=service.tasks.classify.classifier.labels[:1],
        top_k=None,
        single=False,
    )
    return Served(
        task,
        internal,
        params,
        lambda ctx, scores: encode(ctx, scores.reshape(-1, 1)),
        wire.request_timeout,
    )


def _similarity(call: Call[TeiSimilarityRequest]) -> Served:
    wire, service = call.wire, call.service
    task = service.tasks.score
    if service.kind != "embedding" or task is None:
        raise InvalidRequestError(f"/similarity needs an embedding model; this is {service.kind}")
    sentences = wire.inputs.sentences
    params = service.pooling_params(
        PoolingOptions(
            truncate_prompt_tokens=-1 if wire.truncate else None, truncation_side=wire.side()
        )
    )
    internal = ScoreRequest(
        [wire.inputs.source_sentence],
        sentences,
        pair_up(1, len(sentences)),
        names=("source_sentence", "sentences[{}]"),
    )
    return Served(task, internal, params, similarity_body, wire.request_timeout)


def sparse_served(call: Call[SparseEmbedRequest]) -> Served:
    wire, service = call.wire, call.service
    params = service.pooling_params(
        PoolingOptions(
            truncate_prompt_tokens=-1 if wire.truncate else None, truncation_side=wire.side()
        )
    )
    internal = PoolingRequest(_prompted(service, wire.prompt_name, wire.inputs), "sparse")
    return Served(
        service.tasks.pooling,
        internal,
        params,
        sparse_body,
        wire.request_timeout,
        vectors=Vectors("sparse"),
    )


def rerank_served(call: Call[TeiRerankRequest]) -> Served:
    wire, service = call.wire, call.service
    task = service.tasks.score
    assert task is not None  # model_for chose a model that serves this route
    internal = ScoreRequest(
        [wire.query],
        wire.texts,
        pair_up(1, len(wire.texts)),
        fit_documents=wire.truncate is None,
        names=("query", "texts[{}]"),
    )
    params = service.pooling_params(
        PoolingOptions(
            truncate_prompt_tokens=-1 if wire.truncate else None,
            truncation_side=wire.side(),
            use_activation=not wire.raw_scores,
        )
    )
    encode = partial(rerank_body, texts=wire.texts, return_text=wire.return_text)
    return Served(task, internal, params, encode, wire.request_timeout)


INPUTS = Inputs[Any]("inputs", _count, cut_with=TRUNCATE)
SENTENCES = Inputs[TeiSimilarityRequest](
    "sentences", lambda wire: len(wire.inputs.sentences), cut_with=TRUNCATE
)
TEXTS = Inputs[TeiRerankRequest]("texts", lambda wire: len(wire.texts), cut_with=TRUNCATE)


def _tei(
    path: str,
    body: Any,
    answer: Any,
    translate: Any,
    inputs: Inputs[Any],
    name: str,
    serves: Any,
    **more: Any,
) -> Endpoint[Any]:
    return Endpoint(
        path,
        body,
        answer,
        translate,
        inputs,
        name,
        serves,
        errors=TEI_ERRORS,
        model_field=None,
        **more,
    )


def _embedders_or_classifiers(tasks: TaskSet) -> bool:
    return embedders(tasks) or classifiers(tasks)


def _sparse_models(tasks: TaskSet) -> bool:
    return bool(tasks.sparse)


def _is_similarity(data: Any, service: ModelService) -> bool:
    return (
        service.kind == "embedding"
        and isinstance(data, dict)
        and isinstance(data.get("inputs"), dict)
    )


def _is_feature_extraction(data: Any, service: ModelService) -> bool:
    return service.kind == "embedding" and not _is_similarity(data, service)


def _has_texts(data: Any, service: ModelService) -> bool:
    """TEI's rerank body: `texts` where the others have `documents`."""
    return isinstance(data, dict) and "texts" in data


INFERENCE_API = (
    "The Hugging Face Inference API's one route, as text-embeddings-inference serves it: "
    "feature extraction and sentence similarity on an embedding model, text classification on "
    "a classifier or cross-encoder (a single text's labels in a list of one)."
)
ENDPOINTS = [
    _tei("/embed", TeiEmbedRequest, TeiEmbedResponse, embed_served, INPUTS, "embed", embedders),
    _tei(
        "/embed_all",
        TeiEmbedAllRequest,
        TeiEmbedResponse,
        embed_all_served,
        INPUTS,
        "embed_all",
        token_embedders,
    ),
    _tei(
        "/similarity",
        TeiSimilarityRequest,
        TeiSimilarityResponse,
        _similarity,
        SENTENCES,
        "similarity",
        embedders,
    ),
    _tei(
        "/predict",
        TeiPredictRequest,
        TeiPredictResponse,
        partial(predict_served, nested=False),
        INPUTS,
        "predict",
        classifiers,
    ),
    # POST /: feature extraction or similarity on an embedding model, else classification.
    _tei(
        "/",
        TeiEmbedRequest,
        TeiEmbedResponse,
        embed_served,
        INPUTS,
        "inference_api",
        _embedders_or_classifiers,
        description=INFERENCE_API,
        matches=_is_feature_extraction,
    ),
    _tei(
        "/",
        TeiSimilarityRequest,
        TeiSimilarityResponse,
        _similarity,
        SENTENCES,
        "inference_api",
        _embedders_or_classifiers,
        matches=_is_similarity,
    ),
    _tei(
        "/",
        TeiPredictRequest,
        TeiPredictResponse,
        partial(predict_served, nested=True),
        INPUTS,
        "inference_api",
        _embedders_or_classifiers,
    ),
    # TEI's shape of the rerank paths, beside Jina's, Cohere's and vLLM's (`apis/rerank.py`).
    *[
        _tei(
            path,
            TeiRerankRequest,
            TeiRerankResponse,
            rerank_served,
            TEXTS,
            "rerank",
            scorers,
            matches=_has_texts,
        )
        for path in RERANK_PATHS
    ],
    Endpoint(
        "/embed_sparse",
        SparseEmbedRequest,
        SparseResponse,
        sparse_served,
        INPUTS,
        "embed_sparse",
        _sparse_models,
        description="text-embeddings-inference's sparse route: each input's nonzero weights.",
        errors=TEI_ERRORS,
    ),
]
