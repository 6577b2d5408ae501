"""The Batch API's answers as OpenAI documents them, for `/docs` and the OpenAPI document (the
routes write them with `StoredFile.wire` and `BatchRecord.wire`; tests hold the two together)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class FileObject(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    expires_at: int | None
    filename: str
    purpose: Literal["batch", "batch_output"]
    status: Literal["processed"] = "processed"
    status_details: None = None


class FileList(BaseModel):
    model_config = ConfigDict(extra="forbid")
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    object: Literal["file"] = "file"
    deleted: bool


class BatchError(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str
    message: str
    param: str | None
    line: int | None


class BatchErrors(BaseModel):
    model_config = ConfigDict(extra="forbid")
    object: Literal["list"] = "list"
    data: list[BatchError]


class RequestCounts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    total: int
    completed: int
    failed: int


class BatchObject(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: BatchErrors | None
    input_file_id: str
    completion_window: str
    status: Literal[
        "validating",
        "failed",
        "in_progress",
        "finalizing",
        "completed",
        "expired",
        "cancelling",
        "cancelled",
    ]
    output_file_id: str | None
    error_file_id: str | None
    created_at: int
    in_progress_at: int | None
    expires_at: int
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    request_counts: RequestCounts
    metadata: dict[str, str] | None


class BatchList(BaseModel):
    model_config = ConfigDict(extra="forbid")
    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool
