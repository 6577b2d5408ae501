"""The playground against a server started with `--api-key`: the page itself loads without a
key, asks for one after the API's 401, and keeps the key the user types in memory only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from playwright.sync_api import Page

from tests.browser.helpers import (
    ConsoleLog,
    cosine_matrix,
    heatmap,
    model_options,
    run_action,
    screenshot,
    wait_ready,
)
from tests.e2e.harness import TEXTS, Server, running_server

pytestmark = [pytest.mark.slow, pytest.mark.browser]

KEY = "sekrit"


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The bundled model alone, every API route behind `--api-key`."""
    with running_server(tmp_path_factory.mktemp("browser-keyed"), ["--api-key", KEY]) as server:
        yield server


def test_the_page_asks_for_the_key_and_keeps_it_in_memory_only(
    page: Page, keyed_server: Server, console: ConsoleLog, screenshots: Path
) -> None:
    url = keyed_server.url
    assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 401
    # Chromium logs each refused call until the key is typed: the page's models and live polls.
    console.expect_failed_load(401, "/v1/models")
    console.expect_failed_load(401, "/stats/history")

    page.goto(f"{url}/ui")  # the page and its assets need no key
    page.wait_for_selector("#api-key", state="visible")
    assert page.get_attribute("body", "data-state") == "loading"
    assert page.text_content("#key-status") == "This server needs an API key."

    # A wrong key is refused, and said so.
    page.fill("#api-key", "wrong")
    page.click("#btn-api-key")
    page.wait_for_function(
        "() => document.getElementById('key-status').textContent.includes('refused')"
    )
    assert page.get_attribute("body", "data-state") == "loading"

    page.fill("#api-key", KEY)
    page.click("#btn-api-key")
    wait_ready(page)
    headers = {"authorization": f"Bearer {KEY}"}
    cards = httpx.get(f"{url}/v1/models", headers=headers, timeout=10).json()["data"]
    assert model_options(page) == [card["id"] for card in cards]
    assert page.input_value("#api-key") == ""  # the field does not keep it either

    texts = TEXTS[:3]
    page.fill("#texts", "\n".join(texts))
    run_action(page, "#btn-similarity", "#heatmap")
    expected = cosine_matrix(url, cards[0]["id"], texts, key=KEY)
    np.testing.assert_allclose(heatmap(page), expected, atol=1e-6, rtol=0)
    page.wait_for_selector('#live-panel[data-ready="1"]', state="attached")  # polls carry it
    screenshot(page, "body", screenshots, "api-key.png")

    kept = page.evaluate(
        """() => ({
            local: JSON.stringify(Object.entries(localStorage)),
            session: JSON.stringify(Object.entries(sessionStorage)),
            cookie: document.cookie,
            url: location.href,
        })"""
    )
    for where, text in kept.items():
        assert KEY not in text, (where, text)
    assert KEY not in page.url
    assert all(KEY not in cookie["value"] for cookie in page.context.cookies())
    assert console.failed_loads(401, "/v1/models") >= 2  # no key, then the wrong one
