"""The playground page against a two-model server: what it shows equals what the API answers.

Each number the page renders is read from the attribute the page writes for that purpose
(`data-value`, `data-score`, `data-index`) and compared with a separate call to the same API
route; every wait is on the page's `data-state`/`data-ready`, its `#error` box, or the server's
own counters.
"""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

import httpx
import numpy as np
import pytest
from playwright.sync_api import Page

from tests.browser.helpers import (
    ALIAS,
    EMBEDDER,
    MAX_CLIENT_BATCH,
    RERANKER,
    ConsoleLog,
    cosine_matrix,
    heatmap,
    model_options,
    open_playground,
    post_ok,
    run_action,
    screenshot,
    wait_ready,
)
from tests.e2e.harness import TEXTS, Server

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# The page's numbers come from float32 vectors the server sends as JSON; a separate request may
# batch them differently, which moves the last bits.
TOLERANCE = 1e-6
SIMILAR = [TEXTS[0], "A fast brown fox leaps over a sleepy dog.", TEXTS[7]]
QUERY = "Which animal jumps over the dog?"
DOCUMENTS = [TEXTS[7], TEXTS[0], TEXTS[4], TEXTS[10]]


def test_page_loads_and_lists_every_served_name(
    page: Page, server: Server, console: ConsoleLog
) -> None:
    page.goto(f"{server.url}/")  # a browser opening the server's address lands on the page
    wait_ready(page)
    assert page.url == f"{server.url}/ui"
    cards = httpx.get(f"{server.url}/v1/models", timeout=10).json()["data"]
    assert [card["id"] for card in cards] == [EMBEDDER, ALIAS, RERANKER]
    assert model_options(page) == [EMBEDDER, ALIAS, RERANKER]
    assert page.input_value("#model-select") == EMBEDDER
    assert page.is_enabled("#btn-similarity")
    assert page.locator("#error").is_hidden()
    page.wait_for_selector('#live-panel[data-ready="1"]', state="attached")  # its first poll
    assert console.unexpected() == []  # (the `page` fixture checks again when the test ends)


def test_similarity_heatmap_equals_the_cosines_of_the_api_vectors(
    page: Page, server: Server, screenshots: Path
) -> None:
    open_playground(page, server.url)
    page.fill("#texts", "\n".join(SIMILAR))
    run_action(page, "#btn-similarity", "#heatmap")

    shown = heatmap(page)
    expected = cosine_matrix(server.url, EMBEDDER, SIMILAR)
    assert shown.shape == (3, 3)
    np.testing.assert_allclose(shown, expected, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(np.diag(shown), 1.0, atol=TOLERANCE)
    assert shown[0, 1] > shown[0, 2]  # the paraphrase is nearer than the unrelated sentence
    screenshot(page, "#panel-texts", screenshots, "panel-texts.png")


def test_rerank_order_and_scores_equal_the_api(
    page: Page, server: Server, screenshots: Path
) -> None:
    open_playground(page, server.url)
    page.select_option("#model-select", RERANKER)
    assert page.is_disabled("#btn-similarity")  # the cross-encoder does not embed
    page.fill("#rerank-query", QUERY)
    page.fill("#rerank-documents", "\n".join(DOCUMENTS))
    run_action(page, "#btn-rerank", "#rerank-results")

    items = page.locator("#rerank-results li").evaluate_all(
        "items => items.map(item => [Number(item.dataset.index), Number(item.dataset.score),"
        " item.querySelector('.doc').textContent])"
    )
    body = {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS}
    results = post_ok(server.url, "/rerank", body)["results"]
    scores = [result["relevance_score"] for result in results]
    # Order is only meaningful where the scores are further apart than the tolerance.
    assert min(a - b for a, b in pairwise(scores)) > 10 * TOLERANCE, scores
    assert [index for index, _, _ in items] == [result["index"] for result in results]
    np.testing.assert_allclose([score for _, score, _ in items], scores, atol=TOLERANCE, rtol=0)
    assert [text for _, _, text in items] == [DOCUMENTS[result["index"]] for result in results]
    screenshot(page, "#panel-rerank", screenshots, "panel-rerank.png")


def test_live_panel_counts_requests_sent_to_the_server(
    page: Page, server: Server, screenshots: Path
) -> None:
    open_playground(page, server.url)
    page.wait_for_selector('#live-panel[data-ready="1"]', state="attached")
    before = int(page.text_content("#live-requests-total") or "")
    sent = 5
    for text in TEXTS[:sent]:
        post_ok(server.url, "/v1/embeddings", {"model": EMBEDDER, "input": text})

    page.wait_for_function(
        "least => Number(document.getElementById('live-requests-total').textContent) >= least",
        arg=before + sent,
    )
    shown = int(page.text_content("#live-requests-total") or "")
    history = httpx.get(f"{server.url}/stats/history", timeout=10).json()
    assert before + sent <= shown <= history["requests_total"], (before, shown, history)
    # A sample is shown, with a row per model (by its first served name).
    page.wait_for_selector("#live-metrics dt", state="attached")
    rows = page.locator("#live-models tbody th").evaluate_all(
        "cells => cells.map(cell => cell.title)"
    )
    assert rows == [EMBEDDER, RERANKER]
    screenshot(page, "#panel-live", screenshots, "panel-live.png")


def test_classify_and_tokens_on_the_reranker(page: Page, server: Server, screenshots: Path) -> None:
    texts = [TEXTS[6], TEXTS[3]]
    open_playground(page, server.url)
    page.select_option("#model-select", RERANKER)
    page.fill("#texts", "\n".join(texts))

    run_action(page, "#btn-classify", "#classify-results")
    shown = page.locator("#classify-results article").evaluate_all(
        "items => items.map(item => [Number(item.dataset.index),"
        " item.querySelector('.label').textContent, item.querySelector('.text').textContent])"
    )
    expected = post_ok(server.url, "/classify", {"model": RERANKER, "input": texts})["data"]
    assert shown == [[item["index"], item["label"], texts[item["index"]]] for item in expected]

    run_action(page, "#btn-tokens", "#tokens-results")
    articles = page.locator("#tokens-results article")
    assert articles.count() == len(texts)
    for i, text in enumerate(texts):
        reference = post_ok(
            server.url,
            "/tokenize",
            {"model": RERANKER, "prompt": text, "return_token_strs": True},
        )
        article = articles.nth(i)
        count = re.fullmatch(r"(\d+) tokens of (\d+)", article.locator(".count").inner_text())
        assert count, article.inner_text()
        assert (int(count[1]), int(count[2])) == (reference["count"], reference["max_model_len"])
        assert article.locator(".chip").all_inner_texts() == reference["token_strs"]
    screenshot(page, "#panel-texts", screenshots, "panel-texts-reranker.png")


def test_a_refused_request_shows_the_servers_own_message(
    page: Page, server: Server, console: ConsoleLog, screenshots: Path
) -> None:
    too_many = TEXTS[: MAX_CLIENT_BATCH + 1]
    response = httpx.post(
        f"{server.url}/v1/embeddings", json={"model": EMBEDDER, "input": too_many}, timeout=30
    )
    assert response.status_code == 413, response.text
    message = response.json()["error"]["message"]
    console.expect_failed_load(413, "/v1/embeddings")  # chromium logs the refused fetch

    open_playground(page, server.url)
    page.fill("#texts", "\n".join(too_many))
    page.click("#btn-similarity")
    page.wait_for_selector("#error", state="visible")
    assert page.text_content("#error") == f"POST /v1/embeddings answered 413: {message}"
    assert page.locator("#similarity-block").is_hidden()
    assert page.get_attribute("#heatmap", "data-ready") is None
    page.screenshot(path=screenshots / "error.png")

    # Within the limit again, the error goes and the result comes.
    page.fill("#texts", "\n".join(too_many[:MAX_CLIENT_BATCH]))
    run_action(page, "#btn-similarity", "#heatmap")
    assert page.locator("#error").is_hidden()
    assert heatmap(page).shape == (MAX_CLIENT_BATCH, MAX_CLIENT_BATCH)
