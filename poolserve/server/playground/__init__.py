"""The playground page (`GET /ui`, and `GET /` sends a browser there) and the live panel's data
(`GET /stats/history`). The page is three static files shipped in the package: no build step,
nothing fetched from elsewhere, so it works offline. It holds no secret and loads without an API
key; the API calls it makes carry the key the user types (kept in the page's memory only)."""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from poolserve.apis.answer_docs import HistoryBody
from poolserve.server.app_state import state_of
from poolserve.server.error_responses import error_response
from poolserve.server.openapi_docs import documented
from poolserve.server.responses import json_response

playground_router = APIRouter()

PAGE = "/ui"
ASSETS = "/ui/assets/"
# The page's files by name, with their media types.
_FILES = {
    "index.html": "text/html; charset=utf-8",
    "playground.js": "text/javascript; charset=utf-8",
    "playground.css": "text/css; charset=utf-8",
}
# The browser asks again on every load, so a new version of the page shows at once.
_CACHE = {"cache-control": "no-cache"}


def _file(name: str) -> bytes:
    return (files("poolserve.server") / "playground" / name).read_bytes()


@playground_router.get(PAGE, include_in_schema=False)
async def page(request: Request) -> Response:
    body = await state_of(request).cpu.run(_file, "index.html")
    return Response(body, media_type=_FILES["index.html"], headers=_CACHE)


@playground_router.get(ASSETS + "{name}", include_in_schema=False)
async def asset(request: Request, name: str) -> Response:
    if name not in _FILES or name == "index.html":
        return error_response(404, f"no playground file {name!r}; the page is at {PAGE}")
    body = await state_of(request).cpu.run(_file, name)
    return Response(body, media_type=_FILES[name], headers=_CACHE)


@playground_router.get("/", include_in_schema=False)
async def home() -> Response:
    """A browser opening the server's address gets the playground (`POST /` is TEI's API)."""
    return RedirectResponse(PAGE, status_code=307)


@playground_router.get("/stats/history", **documented(HistoryBody))
async def history(request: Request) -> Response:
    """The last minutes of the server, a sample every few seconds (requests/s, latency
    percentiles, queue depth, batch sizes, padding efficiency), for the live panel."""
    state = state_of(request)
    return json_response(await state.cpu.run(state.metrics.live.body))
