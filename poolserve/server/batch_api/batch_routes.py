"""OpenAI's Batch API routes, in OpenAI's shapes (what the openai SDK's `client.files` and
`client.batches` call): `/v1/files` (upload, list, retrieve, content, delete) and `/v1/batches`
(create, list, retrieve, cancel). They do no model work of their own, so the door admits them
without pricing (server/edge.py); the batch's lines are admitted one by one as they run."""

from __future__ import annotations

import asyncio
from typing import Literal

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import FileResponse, Response

from poolserve.errors import EngineUnavailableError, InvalidRequestError
from poolserve.server.app_state import state_of
from poolserve.server.batch_api.batch_schemas import (
    BatchList,
    BatchObject,
    FileDeleted,
    FileList,
    FileObject,
)
from poolserve.server.batch_api.batch_service import BatchService
from poolserve.server.batch_api.multipart_upload import read_upload
from poolserve.server.body import parse_body
from poolserve.server.openapi_docs import documented
from poolserve.server.responses import json_response

ROUTES = APIRouter()
# The upload's body, as OpenAI documents it (the route reads it itself: multipart_upload.py).
UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "purpose"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "purpose": {"type": "string", "enum": ["batch"]},
                    },
                }
            }
        },
    }
}
# OpenAI's bounds on a file's own expiry (`expires_after[seconds]`): an hour to 30 days.
FILE_EXPIRY_SECONDS = (3600, 30 * 24 * 3600)


def batches_of(request: Request) -> BatchService:
    service: BatchService | None = request.app.state.batches
    if service is None or not service.started:
        raise EngineUnavailableError(
            "the Batch API is off on this server: another poolserve server uses its batch "
            "folder (the log names it); start this one with a --batch-dir of its own"
        )
    return service


class OutputExpiry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    anchor: Literal["created_at"] = "created_at"
    seconds: int = Field(ge=FILE_EXPIRY_SECONDS[0], le=FILE_EXPIRY_SECONDS[1])


class BatchCreate(BaseModel):
    """OpenAI's `POST /v1/batches` body."""

    model_config = ConfigDict(extra="forbid")
    input_file_id: str = Field(max_length=128)
    endpoint: str = Field(max_length=128)
    completion_window: str = Field(max_length=32)
    metadata: dict[str, str] | None = None
    output_expires_after: OutputExpiry | None = None


def _listed(data: list[dict[str, object]], has_more: bool) -> Response:
    return json_response(
        orjson.dumps(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": has_more,
            }
        )
    )


def _limit(request: Request, default: int, most: int) -> int:
    value = request.query_params.get("limit")
    try:
        limit = default if value is None else int(value)
    except ValueError:
        limit = 0
    if not 1 <= limit <= most:
        raise InvalidRequestError(f"limit must be an integer from 1 to {most}", param="limit")
    return limit


@ROUTES.post(
    "/v1/files",
    name="upload_file",
    **documented(FileObject, also=(400, 413, 415, 507)),
    openapi_extra=UPLOAD_BODY,
)
async def upload_file(request: Request) -> Response:
    """Upload a JSONL file of batch requests (multipart: `file`, `purpose=batch`)."""
    service = batches_of(request)
    files = service.files
    length = request.headers.get("content-length")
    upload = await asyncio.to_thread(files.upload, int(length) if length else None)
    try:
        filename, fields = await read_upload(request, upload)
        purpose = fields.get("purpose")
        if purpose != "batch":
            raise InvalidRequestError(
                f'purpose must be "batch" (this server keeps batch files); got {purpose!r}',
                param="purpose",
            )
        lifetime = _file_lifetime(fields)
        stored = await asyncio.to_thread(files.keep, upload, filename, purpose, lifetime)
    except BaseException:
        await asyncio.to_thread(upload.discard)
        raise
    files.add(stored)
    service.files_changed()
    return json_response(orjson.dumps(stored.wire()))


def _file_lifetime(fields: dict[str, str]) -> float | None:
    """Seconds from `expires_after[seconds]` (anchored at created_at), None where not sent."""
    anchor = fields.get("expires_after[anchor]", "created_at")
    seconds = fields.get("expires_after[seconds]")
    if anchor != "created_at":
        raise InvalidRequestError(
            'expires_after[anchor] must be "created_at"', param="expires_after[anchor]"
        )
    if seconds is None:
        return None
    low, high = FILE_EXPIRY_SECONDS
    if not seconds.strip().isdigit() or not low <= int(seconds) <= high:
        raise InvalidRequestError(
            f"expires_after[seconds] must be an integer from {low} to {high}",
            param="expires_after[seconds]",
        )
    return float(seconds)


@ROUTES.get("/v1/files", name="list_files", **documented(FileList, also=(400,)))
async def list_files(request: Request) -> Response:
    service = batches_of(request)
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequestError('order must be "asc" or "desc"', param="order")
    limit = _limit(request, 10_000, 10_000)
    files = service.files.listed(request.query_params.get("purpose"), newest_first=order == "desc")
    after = request.query_params.get("after")
    if after is not None:
        ids = [each.id for each in files]
        files = files[ids.index(after) + 1 :] if after in ids else []
    return _listed([each.wire() for each in files[:limit]], len(files) > limit)


@ROUTES.get("/v1/files/{file_id}", name="retrieve_file", **documented(FileObject))
async def retrieve_file(request: Request, file_id: str) -> Response:
    return json_response(orjson.dumps(batches_of(request).files.get(file_id).wire()))


@ROUTES.get(
    "/v1/files/{file_id}/content",
    name="file_content",
    **documented({"content": {"application/octet-stream": {}}, "description": "the file's bytes"}),
)
async def file_content(request: Request, file_id: str) -> Response:
    """The file's bytes, streamed from disk."""
    files = batches_of(request).files
    stored = files.get(file_id)
    return FileResponse(
        files.path(stored.id), media_type="application/octet-stream", filename=stored.filename
    )


@ROUTES.delete("/v1/files/{file_id}", name="delete_file", **documented(FileDeleted, also=(409,)))
async def delete_file(request: Request, file_id: str) -> Response:
    service = batches_of(request)
    stored = service.files.get(file_id)
    await service.delete_file(stored.id)
    return json_response(orjson.dumps({"id": stored.id, "object": "file", "deleted": True}))


@ROUTES.post("/v1/batches", name="create_batch", **documented(BatchObject, BatchCreate))
async def create_batch(request: Request) -> Response:
    """A batch of the requests in an uploaded file, run in the background (lowest) lane."""
    service = batches_of(request)
    wire = await parse_body(request, BatchCreate, state_of(request).cpu)
    output_lifetime = wire.output_expires_after.seconds if wire.output_expires_after else None
    record = await service.create(
        wire.input_file_id, wire.endpoint, wire.completion_window, wire.metadata, output_lifetime
    )
    return json_response(orjson.dumps(record.wire()))


@ROUTES.get("/v1/batches", name="list_batches", **documented(BatchList, also=(400,)))
async def list_batches(request: Request) -> Response:
    records, has_more = batches_of(request).listed(
        _limit(request, 20, 100), request.query_params.get("after")
    )
    return _listed([record.wire() for record in records], has_more)


@ROUTES.get("/v1/batches/{batch_id}", name="retrieve_batch", **documented(BatchObject))
async def retrieve_batch(request: Request, batch_id: str) -> Response:
    return json_response(orjson.dumps(batches_of(request).get(batch_id).wire()))


@ROUTES.post(
    "/v1/batches/{batch_id}/cancel",
    name="cancel_batch",
    **documented(BatchObject, also=(409,)),
)
async def cancel_batch(request: Request, batch_id: str) -> Response:
    record = await batches_of(request).cancel(batch_id)
    return json_response(orjson.dumps(record.wire()))
