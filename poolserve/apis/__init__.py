"""The API families poolserve speaks, one module each: its request schemas, answer docs,
encoders and endpoint declarations (`declarations.py`), which every front end stands on: HTTP
serves them all (server/template.py), gRPC text-embeddings-inference's (tei_grpc/). What the
families share: the request bodies' base (`request_bodies.py`), the answer bodies described for
the docs (`answer_docs.py`), the list envelope (`envelope.py`) and the sentences a failed
validation is told in (`validation_messages.py`).

`FAMILIES` registers them: adding a family is its module and one line here. Where two families
declare one path (`/rerank`, `/v1/embeddings`), the first listed names the route in `/docs`."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from poolserve.apis import cohere, openai, rerank, tei, vllm, voyage
from poolserve.apis.declarations import Endpoint

FAMILIES: tuple[ModuleType, ...] = (openai, cohere, vllm, rerank, tei, voyage)


def endpoints() -> list[Endpoint[Any]]:
    """Every family's declared endpoints, in the families' order."""
    return [endpoint for family in FAMILIES for endpoint in getattr(family, "ENDPOINTS", ())]
