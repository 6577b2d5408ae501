"""The playground page (`GET /ui`) in a real browser: Debian's headless chromium driven by
Playwright, against real server processes.

One two-model server (the bundled embedder served as "minilm" and "embedder", a generated
cross-encoder as "reranker") and one browser are shared by every test of this package, and
stopped when it ends (Playwright's sync API holds an event loop on the main thread while it
runs, which other tests' `asyncio.run` must not find); each test gets a fresh
browser context (no storage, no cookies) and a page whose console is watched: an error, a
warning or an uncaught exception fails the test unless the test said it expects it.

Every wait is on something the page or the server exposes (`data-state`, `data-ready`, the
`#error` box, the server's counters); Playwright's timeouts only bound those waits.

Screenshots of the panels go to `test-output/browser/` in the repository (or
`$POOLSERVE_TEST_OUTPUT/browser/`), where a reviewer finds them after `make test`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from tests.browser.helpers import (
    ALIAS,
    CHROMIUM,
    CHROMIUM_ARGS,
    EMBEDDER,
    MAX_CLIENT_BATCH,
    RERANKER,
    VIEWPORT,
    WAIT_MS,
    ConsoleLog,
    output_dir,
)
from tests.e2e.harness import Server, running_server


@pytest.fixture(scope="package", autouse=True)
def chromium_installed() -> Path:
    """Fail (never skip) every browser test when Debian's chromium is missing, before any server
    starts."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests drive Debian's chromium. Install it once "
            "by running `make install-test` as root (it runs `apt-get install -y chromium`); "
            "never `playwright install`.",
            pytrace=False,
        )
    return CHROMIUM


@pytest.fixture(scope="package")
def screenshots() -> Path:
    directory = output_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    driver = sync_playwright().start()
    try:
        yield driver
    finally:
        driver.stop()


@pytest.fixture(scope="package")
def browser(playwright: Playwright, chromium_installed: Path) -> Iterator[Browser]:
    launched = playwright.chromium.launch(
        executable_path=str(chromium_installed), args=CHROMIUM_ARGS
    )
    try:
        yield launched
    finally:
        launched.close()


@pytest.fixture(scope="package")
def server(
    tmp_path_factory: pytest.TempPathFactory, model_path: Path, cross_encoder_dir: Path
) -> Iterator[Server]:
    """The embedder (as "minilm" and "embedder") and the cross-encoder ("reranker") in one
    process, taking at most `MAX_CLIENT_BATCH` inputs per request."""
    directory = tmp_path_factory.mktemp("browser-server")
    config = directory / "models.toml"
    config.write_text(
        f'[[models]]\nmodel = "{model_path}"\nserved_model_name = ["{EMBEDDER}", "{ALIAS}"]\n\n'
        f'[[models]]\nmodel = "{cross_encoder_dir}"\nserved_model_name = "{RERANKER}"\n'
    )
    flags = ["--config", str(config), "--max-client-batch-size", str(MAX_CLIENT_BATCH)]
    with running_server(directory, flags) as started:
        yield started


@pytest.fixture
def console() -> ConsoleLog:
    return ConsoleLog()


@pytest.fixture
def page(browser: Browser, console: ConsoleLog) -> Iterator[Page]:
    """A page in a fresh context; the test fails if its console showed anything unexpected."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    opened.on("console", console.on_console)
    opened.on("pageerror", console.on_page_error)
    try:
        yield opened
    finally:
        context.close()
    problems = console.unexpected()
    if problems:
        lines = "\n".join(f"  {kind}: {text} ({url})" for kind, text, url in problems)
        pytest.fail(f"the page's console showed errors or warnings:\n{lines}", pytrace=False)
