"""In-process HTTP: the app over the session engine, driven through httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from poolserve import ServerConfig
from poolserve.server import create_app


@pytest.fixture
async def client(engine: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh app over the shared engine (the app's shutdown leaves it open)."""
    app = create_app(engine, ServerConfig())
    async with (
        LifespanManager(app) as manager,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=manager.app),
            base_url="http://poolserve.test",
            timeout=120,
        ) as http,
    ):
        yield http
