"""An API endpoint declared as data, on which every front end stands: the path, the body's schema,
the documented answer and error shape, how the body names its inputs, and `translate`, which
turns a parsed body, for the model chosen to serve it, into what the serving step runs
(`Served`: the task, its internal request and options, the encoder of the family's answer).
`serves` says which models serve an endpoint (by their tasks). HTTP serves every declaration
with one handler (server/template.py); gRPC runs TEI's declarations' translations
(tei_grpc/rpcs.py).

Several families may declare one path (`/rerank`: text-embeddings-inference's body has
`texts`, Jina's, Cohere's and vLLM's `documents`): each such shape but one says which bodies
are its own (`matches`, given the decoded JSON and the model the path serves by default), the
one without is the rest's (`Shapes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from poolserve.apis.answer_docs import ErrorBody
from poolserve.engine.context import Encoder, PoolingParams, Task
from poolserve.inputs.images.sources import ImageInput
from poolserve.service.model_service import ModelService
from poolserve.serving.serving_state import ServingState
from poolserve.serving.serving_step import Vectors
from poolserve.tasks.task_set import TaskSet

WireT = TypeVar("WireT", bound=BaseModel)

# An error's JSON body in an API family's own shape, from its status and message.
ErrorRender = Callable[[int, str], bytes]


@dataclass(frozen=True)
class ErrorShape:
    """An API family's errors: their body as the OpenAPI document gives it, and how to write
    one (None: OpenAI's, the default)."""

    body: type[BaseModel]
    render: ErrorRender | None = None


# OpenAI's error shape: every endpoint's unless its family declares its own.
OPENAI_ERRORS = ErrorShape(ErrorBody)


@dataclass(frozen=True)
class Served:
    """What one request runs: `internal` through `task` with `params`, answered by `encode`,
    within `timeout` seconds (the body's own limit, if it asks for one)."""

    task: Task[Any, Any]
    internal: Any
    params: PoolingParams
    encode: Encoder[Any, Any]
    timeout: float | None = None
    # Its image inputs, each with its name ("input 2"), whose URLs are fetched before it runs.
    images: Sequence[tuple[str, ImageInput]] = ()
    # What vectors it answers (None: none): their spaces' fingerprints go in the response.
    vectors: Vectors | None = None


@dataclass(frozen=True)
class Call(Generic[WireT]):
    """A parsed body and the model chosen to serve it."""

    wire: WireT
    service: ModelService
    state: ServingState


@dataclass(frozen=True)
class Inputs(Generic[WireT]):
    """How a body names its inputs: the field (`texts`: errors say `texts[2]`, the count limit
    names it), how many it holds, and the field that cuts a long one (named in "too long"
    errors; None: vLLM's `truncate_prompt_tokens`)."""

    field: str
    count: Callable[[WireT], int]
    cut_with: str | None = None
    # The field as a body names it, where it may be named otherwise (vLLM's `text_1` for
    # `queries`).
    field_in: Callable[[WireT], str] | None = None

    def field_of(self, wire: WireT) -> str:
        return self.field if self.field_in is None else self.field_in(wire)


def every_model(tasks: TaskSet) -> bool:
    """`Endpoint.serves` of a route every model serves (vLLM's `/pooling`)."""
    return True


def embedders(tasks: TaskSet) -> bool:
    return tasks.embed is not None


def token_embedders(tasks: TaskSet) -> bool:
    """Embedding models with token vectors (an image-text model's towers pool their own)."""
    return tasks.embed is not None and "token_embed" in tasks.heads


def classifiers(tasks: TaskSet) -> bool:
    return tasks.classify is not None


def scorers(tasks: TaskSet) -> bool:
    """Models that score pairs: cross-encoders, and bi-encoders by their vectors' similarity."""
    return tasks.score is not None


@dataclass(frozen=True)
class Endpoint(Generic[WireT]):
    """One POST route of an API family."""

    path: str
    body: type[WireT]
    # The documented answer: a response model, or a union of them.
    answer: Any
    translate: Callable[[Call[WireT]], Served]
    inputs: Inputs[WireT]
    # The route's name in the OpenAPI document (its summary and operation id come from it),
    # and what it does (its description there).
    name: str
    # Which models serve it, by the tasks they have.
    serves: Callable[[TaskSet], bool] = every_model
    description: str | None = None
    errors: ErrorShape = OPENAI_ERRORS
    # The body's field that names the model (None: the first model that serves the path).
    model_field: str | None = "model"
    # Where several shapes share the path: whether a body (decoded JSON) is this shape's, for
    # the model the path serves by default. None: the shape of the bodies no other claims.
    matches: Callable[[Any, ModelService], bool] | None = None
    # Other fields whose item counts `--max-client-batch-size` bounds (vLLM's `/score`: queries
    # and documents), checked after `inputs`.
    more_inputs: tuple[Inputs[WireT], ...] = ()


@dataclass(frozen=True)
class Shapes:
    """The shapes of bodies one path takes (see the module's docstring)."""

    shapes: Sequence[Endpoint[Any]]

    @cached_property
    def errors(self) -> ErrorShape | None:
        """Their errors' form, where they share one (a body that is not JSON takes it)."""
        forms = {shape.errors for shape in self.shapes}
        return next(iter(forms)) if len(forms) == 1 else None

    @cached_property
    def rest(self) -> Endpoint[Any]:
        """The shape of the bodies no other claims."""
        return next(shape for shape in self.shapes if shape.matches is None)

    def of(self, data: Any, default: ModelService) -> Endpoint[Any]:
        """The shape `data` (a decoded body) is, for the model the path serves by default."""
        for shape in self.shapes:
            if shape.matches is not None and shape.matches(data, default):
                return shape
        return self.rest
