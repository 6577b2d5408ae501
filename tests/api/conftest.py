"""In-process HTTP: the app over the session engine, driven through httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.helpers import serving


@pytest.fixture
async def client(engine: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh app over the shared engine (the app's shutdown leaves it open)."""
    async with serving(engine) as http:
        yield http


@pytest.fixture(scope="session")
def cross_encoder_st4_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny cross-encoder in the sentence-transformers 4.x layout most hub rerankers carry."""
    from tests.tiny_models import make_cross_encoder

    return make_cross_encoder(tmp_path_factory.mktemp("tiny") / "cross-encoder-st4", layout="st4")
