"""What the routes share: the engine, the names the model is served under, the task processors."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field

from poolserve.errors import ModelNotFoundError, PayloadTooLargeError
from poolserve.offline import Engine
from poolserve.server.admission import AdmissionControl
from poolserve.server.metrics import Metrics
from poolserve.server.shutdown import GracePeriod


@dataclass(frozen=True)
class ServingState:
    engine: Engine
    # The first name is the one responses carry; clients may use any of them.
    served_names: tuple[str, ...]
    admission: AdmissionControl
    metrics: Metrics
    grace: GracePeriod
    created: int = field(default=0)
    max_client_batch_size: int = 2048
    request_timeout: float | None = None
    # Responses of at least this many bytes are gzipped for clients that accept it; 0: never.
    gzip_min_bytes: int = 0
    # Request ids: a per-process random prefix and a counter (cheaper than uuid4 per request).
    _id_prefix: str = field(default_factory=lambda: os.urandom(4).hex())
    _id_counter: itertools.count[int] = field(default_factory=itertools.count)

    def new_request_id(self) -> str:
        return f"{self._id_prefix}-{next(self._id_counter)}"

    @property
    def model_name(self) -> str:
        return self.served_names[0]

    def check_batch(self, count: int, param: str) -> None:
        """Refuse a request with more inputs than `--max-client-batch-size`, before any work."""
        if count > self.max_client_batch_size:
            raise PayloadTooLargeError(
                f"{param} has {count} items, more than this server takes in one request "
                f"({self.max_client_batch_size}); split it into several requests",
                param=param,
            )

    def check_model(self, requested: str | None) -> None:
        """A request may omit `model`; if it names one, it must be one we serve."""
        if requested is not None and requested not in self.served_names:
            raise ModelNotFoundError(
                f"model {requested!r} is not served here; this server serves "
                + ", ".join(repr(name) for name in self.served_names),
                param="model",
            )
