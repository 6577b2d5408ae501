"""Every RPC of text-embeddings-inference's `tei.v1` services that runs work, declared: its
request message, the HTTP route whose models serve it, whether it streams, and how it is served.

A task RPC's message becomes the body TEI's HTTP route takes (validated by the same schema) and
is translated by that route's own translation (apis/tei/endpoints.py), so both front ends run
the same request for the same inputs; only the answer's encoder differs (replies.py). Tokenize
and Decode run in the CPU pool (`answer`). A stream's messages are each served as one unary
call, concurrently (calls.py); RerankStream's are gathered and ranked as one request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal, TypeVar

from google.protobuf.message import Message
from pydantic import BaseModel, ValidationError

from poolserve.apis.declarations import Call, Served
from poolserve.apis.tei.answers import token_entries
from poolserve.apis.tei.endpoints import (
    embed_all_served,
    embed_served,
    predict_served,
    rerank_served,
    sparse_served,
)
from poolserve.apis.tei.requests import (
    SparseEmbedRequest,
    TeiEmbedAllRequest,
    TeiEmbedRequest,
    TeiPredictRequest,
    TeiRerankRequest,
)
from poolserve.apis.validation_messages import validation_message
from poolserve.engine.context import PoolingOptions
from poolserve.errors import InvalidRequestError
from poolserve.service.model_service import ModelService
from poolserve.serving.serving_state import ServingState
from poolserve.tasks.score import ScoreRequest, pair_up
from poolserve.tei_grpc import replies
from poolserve.tei_grpc.stubs import tei_pb2 as pb

M = TypeVar("M", bound=BaseModel)
# unary: one message in, one out; stream: each message in answered in order; collect: every
# message in, one answer (RerankStream).
Kind = Literal["unary", "stream", "collect"]


@dataclass(frozen=True)
class Rpc:
    service: str
    method: str
    request: type[Message]
    # The HTTP route whose models serve it: TEI's protocol names no model, so the first such
    # model serves it (the first `prefer` takes, if any: a cross-encoder for Rerank).
    path: str
    kind: Kind = "unary"
    # A task RPC: its message(s), for the chosen model, as the request template's `Served`.
    translate: Callable[[Any, ModelService, ServingState], Served] | None = None
    # A CPU RPC: its answer's bytes (run in the CPU pool).
    answer: Callable[[Any, ModelService], bytes] | None = None
    # Among the route's models: those that may serve it, and those served by first.
    only: Callable[[ModelService], bool] = lambda service: True
    prefer: Callable[[ModelService], bool] = lambda service: False
    # What a model must be to serve it, for the error where none here is.
    needs: str = "a model that serves its route"

    @property
    def full_name(self) -> str:
        """As gRPC names it: `/tei.v1.Embed/Embed`."""
        return f"/tei.v1.{self.service}/{self.method}"


def wire_body(schema: type[M], fields: dict[str, Any]) -> M:
    """`fields` validated as `schema` (the HTTP route's body), or a 400 saying why."""
    try:
        return schema.model_validate(fields)
    except ValidationError as exc:
        message, param = validation_message(exc, schema)
        raise InvalidRequestError(message, param=param) from None


def _optional(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def _side(message: Any) -> str:
    return "Left" if message.truncation_direction == pb.TRUNCATION_DIRECTION_LEFT else "Right"


def _cut(message: Any) -> dict[str, Any]:
    """Truncation as TEI's HTTP bodies say it. proto3's `truncate` cannot be left out: false
    leaves it to the server (its --long-input), as an HTTP body without the field does."""
    return {"truncate": True if message.truncate else None, "truncation_direction": _side(message)}


def _embed(message: Any, service: ModelService, state: ServingState) -> Served:
    fields = {
        "inputs": message.inputs,
        "normalize": message.normalize if message.HasField("normalize") else True,
        "prompt_name": _optional(message, "prompt_name"),
        "dimensions": _optional(message, "dimensions"),
        **_cut(message),
    }
    served = embed_served(Call(wire_body(TeiEmbedRequest, fields), service, state))
    return replace(served, encode=partial(replies.embed_answer, chars=len(message.inputs)))


def _embed_all(message: Any, service: ModelService, state: ServingState) -> Served:
    fields = {"inputs": message.inputs, "prompt_name": _optional(message, "prompt_name")}
    wire = wire_body(TeiEmbedAllRequest, {**fields, **_cut(message)})
    served = embed_all_served(Call(wire, service, state))
    return replace(served, encode=partial(replies.embed_all_answer, chars=len(message.inputs)))


def _sparse(message: Any, service: ModelService, state: ServingState) -> Served:
    fields = {
        "inputs": message.inputs,
        "truncate": message.truncate,
        "truncation_direction": _side(message),
        "prompt_name": _optional(message, "prompt_name"),
    }
    served = sparse_served(Call(wire_body(SparseEmbedRequest, fields), service, state))
    return replace(served, encode=partial(replies.sparse_answer, chars=len(message.inputs)))


def _labels(service: ModelService) -> tuple[str, ...]:
    classify = service.tasks.classify
    return classify.classifier.labels if classify is not None else ()


def _predict(message: Any, service: ModelService, state: ServingState) -> Served:
    fields = {"inputs": message.inputs, "raw_scores": message.raw_scores, **_cut(message)}
    wire = wire_body(TeiPredictRequest, fields)
    served = predict_served(Call(wire, service, state), nested=False)
    encode = partial(replies.predict_answer, labels=_labels(service), chars=len(message.inputs))
    return replace(served, encode=encode)


def _predict_pair(message: Any, service: ModelService, state: ServingState) -> Served:
    pair = list(message.inputs)
    if len(pair) != 2:
        raise InvalidRequestError(
            f"inputs holds {len(pair)} texts; a pair is 2 texts", param="inputs"
        )
    fields = {"inputs": [pair], "raw_scores": message.raw_scores, **_cut(message)}
    served = predict_served(
        Call(wire_body(TeiPredictRequest, fields), service, state), nested=False
    )
    chars = sum(map(len, pair))
    encode = partial(replies.predict_answer, labels=_labels(service)[:1], chars=chars)
    return replace(served, encode=encode)


def _rerank(message: Any, service: ModelService, state: ServingState) -> Served:
    texts = list(message.texts)
    state.check_batch(len(texts), "texts")
    fields = {
        "query": message.query,
        "texts": texts,
        "raw_scores": message.raw_scores,
        "return_text": message.return_text,
        **_cut(message),
    }
    served = rerank_served(Call(wire_body(TeiRerankRequest, fields), service, state))
    encode = partial(
        replies.rerank_answer,
        texts=texts,
        return_text=message.return_text,
        chars=len(message.query) + sum(map(len, texts)),
    )
    return replace(served, encode=encode)


def _rerank_stream(messages: Sequence[Any], service: ModelService, state: ServingState) -> Served:
    """Every (query, text) message ranked as one request. `raw_scores`, `return_text` and
    truncation are the first message's (TEI's proto says so of the first two). One query for
    all: the same request as Rerank; several: each text scored with its own query."""
    if not messages:
        raise InvalidRequestError("the stream sent no (query, text) message", param="text")
    first = messages[0]
    queries = [message.query for message in messages]
    if len(set(queries)) == 1:
        return _rerank(
            pb.RerankRequest(
                query=first.query,
                texts=[message.text for message in messages],
                truncate=first.truncate,
                raw_scores=first.raw_scores,
                return_text=first.return_text,
                truncation_direction=first.truncation_direction,
            ),
            service,
            state,
        )
    texts = [message.text for message in messages]
    state.check_batch(len(texts), "text")
    task = service.tasks.score
    assert task is not None  # chosen among the models that serve /rerank
    internal = ScoreRequest(
        queries,
        texts,
        pair_up(len(queries), len(texts)),
        fit_documents=not first.truncate,
        names=("query", "text[{}]"),
    )
    options = PoolingOptions(
        truncate_prompt_tokens=-1 if first.truncate else None,
        truncation_side="left" if _side(first) == "Left" else "right",
        use_activation=not first.raw_scores,
    )
    encode = partial(
        replies.rerank_answer,
        texts=texts,
        return_text=first.return_text,
        chars=sum(map(len, queries)) + sum(map(len, texts)),
    )
    return Served(task, internal, service.pooling_params(options), encode)


def _tokenize(message: Any, service: ModelService) -> bytes:
    name = _optional(message, "prompt_name")
    prompt = service.tasks.prompts.resolve(name, None) if name is not None else None
    text = message.inputs if prompt is None else prompt + message.inputs
    tokens = token_entries(service.tokenizer(), [text], message.add_special_tokens)[0]
    return replies.tokens_answer(tokens)


def _decode(message: Any, service: ModelService) -> bytes:
    tokenizer = service.tokenizer()
    ids = list(message.ids)
    tokenizer.check_token_ids(ids, param="ids")
    text = tokenizer.decode(ids, skip_special_tokens=message.skip_special_tokens)
    return pb.DecodeResponse(text=text).SerializeToString()


def _cross_encoders(service: ModelService) -> bool:
    return service.kind == "cross_encoder"


def _streamed(rpc: Rpc) -> Rpc:
    return replace(rpc, method=f"{rpc.method}Stream", kind="stream")


EMBEDDER = "an embedding model"
_UNARY = [
    Rpc("Embed", "Embed", pb.EmbedRequest, "/embed", translate=_embed, needs=EMBEDDER),
    Rpc(
        "Embed",
        "EmbedSparse",
        pb.EmbedSparseRequest,
        "/embed_sparse",
        translate=_sparse,
        needs="a sparse (SPLADE) model",
    ),
    Rpc(
        "Embed",
        "EmbedAll",
        pb.EmbedAllRequest,
        "/embed_all",
        translate=_embed_all,
        needs="an embedding model with token vectors",
    ),
    Rpc(
        "Predict",
        "Predict",
        pb.PredictRequest,
        "/predict",
        translate=_predict,
        needs="a classifier or cross-encoder",
    ),
    Rpc(
        "Predict",
        "PredictPair",
        pb.PredictPairRequest,
        "/predict",
        translate=_predict_pair,
        only=_cross_encoders,
        needs="a cross-encoder",
    ),
    Rpc("Tokenize", "Tokenize", pb.EncodeRequest, "/tokenize", answer=_tokenize),
    Rpc("Tokenize", "Decode", pb.DecodeRequest, "/detokenize", answer=_decode),
]
RERANKER = "a reranker (a cross-encoder, or a model that scores by similarity)"
RPCS = (
    *_UNARY,
    *map(_streamed, _UNARY),
    Rpc(
        "Rerank",
        "Rerank",
        pb.RerankRequest,
        "/rerank",
        translate=_rerank,
        prefer=_cross_encoders,
        needs=RERANKER,
    ),
    Rpc(
        "Rerank",
        "RerankStream",
        pb.RerankStreamRequest,
        "/rerank",
        kind="collect",
        translate=_rerank_stream,
        prefer=_cross_encoders,
        needs=RERANKER,
    ),
)
