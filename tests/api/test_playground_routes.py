"""The playground page's routes (served from the package, open without a key, offline) and the
live panel's history, whose numbers are checked against the engine's own counters."""

from __future__ import annotations

import re
import threading
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import pytest
from asgi_lifespan import LifespanManager

from poolserve import ServerConfig
from poolserve.app import create_app
from poolserve.observe.live import LiveHistory
from poolserve.offline.model_set import ModelSet
from tests.api.helpers import serving

pytestmark = pytest.mark.anyio

ASSETS = ("/ui/assets/playground.js", "/ui/assets/playground.css")


async def test_the_page_and_its_assets_come_from_the_server_alone(engine: Any) -> None:
    async with serving(engine) as http:
        page = await http.get("/ui")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        for asset in ASSETS:
            assert asset in page.text
        texts = [page.text]
        for asset, media in zip(ASSETS, ("text/javascript", "text/css"), strict=True):
            response = await http.get(asset)
            assert response.status_code == 200
            assert response.headers["content-type"].startswith(media)
            texts.append(response.text)
        # Offline: nothing is loaded from another host.
        for text in texts:
            assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), text[:200]
            assert "@import" not in text and "cdn" not in text.lower()
        missing = await http.get("/ui/assets/other.js")
        assert missing.status_code == 404 and "/ui" in missing.json()["error"]["message"]


async def test_a_browser_at_the_root_is_sent_to_the_page_and_post_root_stays_tei(
    engine: Any,
) -> None:
    async with serving(engine) as http:
        home = await http.get("/")
        assert home.status_code == 307 and home.headers["location"] == "/ui"
        tei = await http.post("/", json={"inputs": "a sentence"})
        assert tei.status_code == 200 and len(tei.json()[0]) == 384


async def test_behind_an_api_key_the_page_is_open_and_the_api_is_not(engine: Any) -> None:
    async with serving(engine, ServerConfig(api_keys=("sekrit",))) as http:
        for path in ("/ui", *ASSETS):
            assert (await http.get(path)).status_code == 200, path
        assert (await http.get("/")).status_code == 307
        for method, path in (("POST", "/"), ("GET", "/v1/models"), ("GET", "/stats/history")):
            assert (await http.request(method, path)).status_code == 401, path
        keyed = await http.get("/stats/history", headers={"authorization": "Bearer sekrit"})
        assert keyed.status_code == 200


async def test_the_history_counts_requests_and_samples_on_its_own(engine: Any) -> None:
    """The app samples by itself (a timer, computed in the CPU pool); requests for a model are
    counted, the others (/health, the page) are not."""
    app = create_app(engine.service)
    live = app.state.serving.metrics.live
    sampled = threading.Event()
    live.on_sample = lambda sample: sampled.set() if sample["requests_per_s"] > 0 else None
    async with (
        LifespanManager(app) as manager,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=manager.app), base_url="http://poolserve.test"
        ) as http,
    ):
        for _ in range(3):
            response = await http.post("/v1/embeddings", json={"input": "hello"})
            assert response.status_code == 200
        await http.get("/health")
        await http.get("/ui")
        body = (await http.get("/stats/history")).json()
        assert body["requests_total"] == 3 and body["interval_s"] == live.interval
        assert await anyio.to_thread.run_sync(sampled.wait, live.interval * 5), "no sample"
        samples = (await http.get("/stats/history")).json()["samples"]
        answered = sum(s["requests_per_s"] for s in samples) * live.interval
        assert answered == pytest.approx(3, rel=0.5)


def test_a_sample_is_the_engines_counters_over_its_interval(engine: Any) -> None:
    models = ModelSet.serving(engine.service)
    history = LiveHistory(models, SimpleNamespace(in_flight=0), interval=1.0)  # type: ignore[arg-type]
    history.take_sample([])
    before = engine.core.stats.snapshot()
    engine.embed(["a short one", "a somewhat longer sentence than the short one"])
    engine.embed(["x"] * 3)
    after = engine.core.stats.snapshot()
    durations = [0.004, 0.001, 0.003, 0.002, 0.010]
    sample = history.take_sample([(engine.service.served_name, d) for d in durations])
    batches = after.batches - before.batches
    items = after.items - before.items
    assert sample["batches"] == batches >= 2
    assert sample["mean_batch_size"] == pytest.approx(items / batches)
    efficiency = (after.tokens - before.tokens) / (after.padded_tokens - before.padded_tokens)
    assert sample["padding_efficiency"] == pytest.approx(efficiency) and 0 < efficiency <= 1
    # Nearest-rank percentiles of the five durations.
    assert (sample["p50_ms"], sample["p90_ms"], sample["p99_ms"]) == pytest.approx((3, 10, 10))
    model = sample["models"][engine.service.served_name]
    assert model["batches"] == batches and model["queue_items"] == 0
    assert history.take_sample([])["p50_ms"] is None  # nothing answered: no latency
