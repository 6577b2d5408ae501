"""Helpers shared by the browser tests: the console watcher, waits on the page's own state, and
the references the page's numbers are checked against (the server's API, called directly)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
from playwright.sync_api import ConsoleMessage, Page, ViewportSize
from playwright.sync_api import Error as PlaywrightError

from tests.e2e.harness import REPO

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# Bounds on waits for conditions (never pauses): generous for a busy 2-core machine.
WAIT_MS = 30_000
VIEWPORT: ViewportSize = {"width": 1280, "height": 1000}

EMBEDDER, ALIAS, RERANKER = "minilm", "embedder", "reranker"
# Small, so that a test can pass it from the page with a few lines of text.
MAX_CLIENT_BATCH = 4
# What chromium logs (a console message of type "error") for a response with an error status.
FAILED_LOAD = "Failed to load resource: the server responded with a status of {status}"


def output_dir() -> Path:
    """Where screenshots go: `$POOLSERVE_TEST_OUTPUT/browser`, else `<repo>/test-output/browser`."""
    root = os.environ.get("POOLSERVE_TEST_OUTPUT")
    return (Path(root) if root else REPO / "test-output") / "browser"


@dataclass
class ConsoleLog:
    """The page's console errors and warnings and its uncaught exceptions, as
    `(kind, text, url)`. A failed resource load is expected only where a test says so."""

    entries: list[tuple[str, str, str]] = field(default_factory=list)
    expected: set[tuple[int, str]] = field(default_factory=set)

    def expect_failed_load(self, status: int, path: str) -> None:
        """Chromium's "Failed to load resource ... status of `status`" for `path` is expected."""
        self.expected.add((status, path))

    def failed_loads(self, status: int, path: str) -> int:
        """How many loads of `path` failed with `status`, as the console reported them."""
        return sum(1 for entry in self.entries if _failed_load(entry, status, path))

    def unexpected(self) -> list[tuple[str, str, str]]:
        return [
            entry
            for entry in self.entries
            if not any(_failed_load(entry, status, path) for status, path in self.expected)
        ]

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.entries.append((message.type, message.text, message.location.get("url", "")))

    def on_page_error(self, error: PlaywrightError) -> None:
        self.entries.append(("pageerror", f"{error.name}: {error.message}", ""))


def _failed_load(entry: tuple[str, str, str], status: int, path: str) -> bool:
    kind, text, url = entry
    return (
        kind == "error"
        and text.startswith(FAILED_LOAD.format(status=status))
        and urlsplit(url).path == path
    )


# -- the page ---------------------------------------------------------------------------------


def open_playground(page: Page, url: str) -> None:
    """Open the page and wait until it has listed the server's models."""
    page.goto(f"{url}/ui")
    wait_ready(page)


def wait_ready(page: Page) -> None:
    page.wait_for_selector('body[data-state="ready"]', state="attached")


def model_options(page: Page) -> list[str]:
    values: list[str] = page.locator("#model-select option").evaluate_all(
        "options => options.map(option => option.value)"
    )
    return values


def run_action(page: Page, button: str, result: str) -> None:
    """Click `button` and wait until `result` carries `data-ready` (the page renders first)."""
    page.click(button)
    page.wait_for_selector(f'{result}[data-ready="1"]', state="attached")


def heatmap(page: Page) -> np.ndarray:
    """The `data-value`s of the heatmap's cells, as a square matrix."""
    values: list[str] = page.locator("#heatmap td[data-value]").evaluate_all(
        "cells => cells.map(cell => cell.dataset.value)"
    )
    size = math.isqrt(len(values))
    assert size * size == len(values), values
    return np.array([float(value) for value in values], dtype=np.float64).reshape(size, size)


def screenshot(page: Page, selector: str, directory: Path, name: str) -> Path:
    path = directory / name
    page.locator(selector).screenshot(path=path)
    assert path.stat().st_size > 0, path
    return path


# -- references -------------------------------------------------------------------------------


def post_ok(url: str, path: str, body: dict[str, Any], key: str | None = None) -> Any:
    headers = {"authorization": f"Bearer {key}"} if key else None
    response = httpx.post(f"{url}{path}", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def cosine_matrix(url: str, model: str, texts: list[str], key: str | None = None) -> np.ndarray:
    """Cosine similarities, in float64, of the vectors `POST /v1/embeddings` returns."""
    data = post_ok(url, "/v1/embeddings", {"model": model, "input": texts}, key)["data"]
    assert [item["index"] for item in data] == list(range(len(texts)))
    vectors = np.array([item["embedding"] for item in data], dtype=np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    matrix: np.ndarray = vectors @ vectors.T
    return matrix
