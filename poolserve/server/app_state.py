"""What an HTTP route reads of its app: the ServingState every front end shares, and the model
a request is for, recorded in its ASGI scope for the metrics."""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import Scope

from poolserve.server.scope_keys import MODEL_KEY
from poolserve.service.model_service import ModelService
from poolserve.serving.serving_state import ServingState


def state_of(request: Request) -> ServingState:
    """What the routes of `request`'s app share."""
    state: ServingState = request.app.state.serving
    return state


def model_for(state: ServingState, scope: Scope, requested: str | None) -> ModelService:
    """The model the request's path serves it on (`ServingState.model_serving`), recorded for
    the metrics."""
    service = state.model_serving(scope["path"], requested)
    scope[MODEL_KEY] = service.served_name
    return service
