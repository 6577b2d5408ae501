"""The API families poolserve speaks, one module each: its request schemas, answer docs,
encoders and endpoint declarations (see `server/template.py`), and any routes it writes out by
hand (`ROUTES`, served whatever the models are).

`FAMILIES` registers them: adding a family is its module and one line here. Where two families
declare one path (`/rerank`, `/v1/embeddings`), the first listed names the route in `/docs`."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from fastapi import APIRouter

from poolserve.server.apis import admin, cohere, openai, rerank, tei, vllm, voyage
from poolserve.server.template import Endpoint

FAMILIES: tuple[ModuleType, ...] = (admin, openai, cohere, vllm, rerank, tei, voyage)


def endpoints() -> list[Endpoint[Any]]:
    """Every family's declared endpoints, in the families' order."""
    return [endpoint for family in FAMILIES for endpoint in getattr(family, "ENDPOINTS", ())]


def hand_routes() -> list[APIRouter]:
    """The families' routes written out by hand."""
    return [family.ROUTES for family in FAMILIES if hasattr(family, "ROUTES")]
