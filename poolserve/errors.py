"""The exception tree: every error a client can cause carries its HTTP status and error type.

Raised anywhere below the HTTP layer; `server/error_responses.py` turns them into the OpenAI-style
body `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import re

# How much of a client's text (a name, a URL, a path) an error repeats.
ECHOED = 200


def echoed(text: str, limit: int = ECHOED) -> str:
    """`text` as an error repeats it: its first `limit` characters, and its length past that."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class PoolserveError(Exception):
    """Base of all poolserve errors; `status` is the HTTP status it maps to."""

    status: int = 500
    error_type: str = "internal_server_error"

    def __init__(
        self, message: str, *, param: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers = headers


class InvalidRequestError(PoolserveError, ValueError):
    """The request is malformed or asks for something impossible (400); in Python, a
    ValueError."""

    status = 400
    error_type = "invalid_request_error"


# How an embedding request has a long input embedded whole, in chunks: in poolserve's own field,
# and (on another family's route, which has no such field) by the server's flag.
CHUNK_IN_THE_REQUEST = '`long_input: "chunk"` (or start the server with --long-input chunk)'
CHUNK_ON_THE_SERVER = "--long-input chunk to the server"


class InputTooLongError(InvalidRequestError):
    """An input has more tokens than the model accepts and truncation was not asked for.

    Its message is `{where} {detail}; shorten it, or pass {cut_with} to cut it`, in the words of
    the API poolserve serves natively (vLLM's `truncate_prompt_tokens`); a route of another
    API family rewords it with its own field names (`reworded`)."""

    def __init__(
        self,
        where: str,
        detail: str,
        *,
        cut_with: str = "`truncate_prompt_tokens` (-1 for the model's maximum)",
        param: str | None = None,
        index: int | None = None,
        chunk_with: str | None = None,
    ) -> None:
        chunk = "" if chunk_with is None else f", or pass {chunk_with} to embed it in chunks"
        super().__init__(
            f"{where} {detail}; shorten it, or pass {cut_with} to cut it{chunk}", param=param
        )
        self.where = where
        self.detail = detail
        self.cut_with = cut_with
        # The input's position in its request's list of inputs, where there is one.
        self.index = index
        # How the request could have it embedded whole, in chunks (an embedding's input).
        self.chunk_with = chunk_with

    def reworded(self, field: str, cut_with: str) -> InputTooLongError:
        """The same error as a route names it: its input as `field[index]`, how to cut it (and,
        where the request could chunk it, the server's flag that does for this route)."""
        where = self.where if self.index is None else f"{field}[{self.index}]"
        return InputTooLongError(
            where,
            self.detail,
            cut_with=cut_with,
            param=field,
            index=self.index,
            chunk_with=None if self.chunk_with is None else CHUNK_ON_THE_SERVER,
        )

    def chunkable(self, chunk_with: str = CHUNK_IN_THE_REQUEST) -> InputTooLongError:
        """The same error, saying how to embed the input whole in chunks instead."""
        return InputTooLongError(
            self.where,
            self.detail,
            cut_with=self.cut_with,
            param=self.param,
            index=self.index,
            chunk_with=chunk_with,
        )


class PayloadTooLargeError(PoolserveError):
    """The request carries more than the server accepts in one request (413)."""

    status = 413
    error_type = "invalid_request_error"


class UnsupportedMediaTypeError(PoolserveError):
    """The body comes in an encoding the server does not read (415)."""

    status = 415
    error_type = "invalid_request_error"


class ConflictError(PoolserveError):
    """The request expects something of the server that is not so (409): its
    `x-expect-embedding-space` names another space than its vectors would be in."""

    status = 409
    error_type = "invalid_request_error"


class OverloadedError(PoolserveError):
    """The server holds as much work as it may; the client should retry later (429)."""

    status = 429
    error_type = "rate_limit_error"


class RequestTimeoutError(PoolserveError):
    """The request did not finish within its time limit; its work was cancelled (504)."""

    status = 504
    error_type = "timeout_error"


class ModelNotFoundError(PoolserveError):
    """The request names a model this server does not serve (404)."""

    status = 404
    error_type = "not_found_error"


class NotFoundError(PoolserveError):
    """No file or batch by that id (404: the Batch API's)."""

    status = 404
    error_type = "invalid_request_error"


class StorageFullError(PoolserveError):
    """The batch folder holds as much as `--max-batch-dir-bytes` allows (507)."""

    status = 507
    error_type = "invalid_request_error"


class EngineUnavailableError(PoolserveError):
    """The engine cannot take work: it is shut down or its runner thread has died (503)."""

    status = 503
    error_type = "service_unavailable"


class InferenceError(PoolserveError):
    """The forward pass failed for the batch this request was in (500)."""

    status = 500
    error_type = "internal_server_error"


class ModelLoadError(Exception):
    """The model could not be found or loaded; raised at start-up, never during a request."""


class SettingError(ModelLoadError, ValueError):
    """A setting that cannot work, said in each audience's words: `cli_message` names flags
    (`--max-model-len 600`), `str()` the Python arguments (`max_model_len=600`)."""

    def __init__(self, cli_message: str) -> None:
        super().__init__(_FLAG.sub(_python_setting, cli_message))
        self.cli_message = cli_message


# A flag and, where one follows, its value (a number or a choice word).
_FLAG = re.compile(r"--([a-z][a-z-]*)(?: (-?\d[\d.]*|on|off|auto|cpu|cuda)\b)?")


def _python_setting(match: re.Match[str]) -> str:
    name = match.group(1).replace("-", "_")
    return f"{name}={match.group(2)}" if match.group(2) else name
