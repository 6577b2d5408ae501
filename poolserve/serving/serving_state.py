"""What every front end's requests share: the models and the names they are served under,
admission, metrics, tracing, the answers' waits and the shutdown's grace period."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field

from poolserve.admission.control import AdmissionControl
from poolserve.engine.cpu_pool import CpuPool
from poolserve.errors import InvalidRequestError, PayloadTooLargeError
from poolserve.inputs.images.fetch import MediaFetcher
from poolserve.inputs.images.policy import MediaPolicy
from poolserve.models.kinds import describe
from poolserve.observe.metrics import Metrics
from poolserve.observe.tracing import Tracing
from poolserve.service.model_service import ModelService
from poolserve.service.registry import ServiceRegistry
from poolserve.serving.answer_waits import AnswerWaits
from poolserve.serving.shutdown import GracePeriod


@dataclass(frozen=True)
class ServingState:
    models: ServiceRegistry
    # The model-specific routes each model serves, in the models' order.
    model_routes: tuple[tuple[str, ...], ...]
    admission: AdmissionControl
    metrics: Metrics
    grace: GracePeriod
    created: int = field(default=0)
    max_client_batch_size: int = 2048
    request_timeout: float | None = None
    # Responses of at least this many bytes are gzipped for clients that accept it; 0: never.
    gzip_min_bytes: int = 0
    # The most bytes a request body may hold, gzipped bodies once decompressed (0: no limit).
    max_request_bytes: int = 0
    # What image inputs may be and come from, and the fetcher of their URLs (None: no
    # --allowed-media-domains, no URL is fetched).
    media: MediaPolicy = field(default_factory=MediaPolicy)
    fetcher: MediaFetcher | None = None
    # Traces of every request (--otlp-endpoint); None: off.
    tracing: Tracing | None = None
    # The requests waiting for their answers, and what may end their waits early.
    waits: AnswerWaits = field(default_factory=AnswerWaits)
    # Request ids: a per-process random prefix and a counter (cheaper than uuid4 per request).
    _id_prefix: str = field(default_factory=lambda: os.urandom(4).hex())
    _id_counter: itertools.count[int] = field(default_factory=itertools.count)
    # The model each path serves a request that names none (`model_serving`), as found.
    _defaults: dict[str, ModelService] = field(default_factory=dict)

    def new_request_id(self) -> str:
        return f"{self._id_prefix}-{next(self._id_counter)}"

    @property
    def cpu(self) -> CpuPool:
        """The one pool every model tokenizes and builds responses in."""
        return self.models.cpu

    def routes_of(self, service: ModelService) -> tuple[str, ...]:
        return self.model_routes[self.models.services.index(service)]

    def check_batch(self, count: int, param: str) -> None:
        """Refuse a request with more inputs than `--max-client-batch-size`, before any work."""
        if count > self.max_client_batch_size:
            raise PayloadTooLargeError(
                f"{param} has {count} items, more than this server takes in one request "
                f"({self.max_client_batch_size}); split it into several requests",
                param=param,
            )

    def model_serving(self, path: str, requested: str | None) -> ModelService:
        """The model a request for `path` is for: the one it names (404 listing the served
        names), or, if it names none, the first that serves the path. A model that does not
        serve the path is a 400 naming those that do."""
        routes = self.model_routes
        if requested is None:
            service = self._defaults.get(path)
            if service is None:
                service = self._defaults[path] = next(
                    (s for s, served in zip(self.models, routes, strict=True) if path in served),
                    self.models.first,
                )
            return service
        service = self.models.find(requested)
        if not self._serves(service, path):
            others = [
                s.served_name
                for s, served in zip(self.models, routes, strict=True)
                if path in served
            ]
            raise InvalidRequestError(
                f"model {requested!r} is {describe(service.kind)}; it does not serve {path}"
                + (f"; models here that do: {', '.join(map(repr, others))}" if others else ""),
                param="model",
            )
        return service

    def models_serving(self, path: str) -> list[ModelService]:
        """The models whose own routes include `path`, in order."""
        return [service for service in self.models if path in self.routes_of(service)]

    def _serves(self, service: ModelService, path: str) -> bool:
        """True for the model's own routes, and for routes no model owns (every model serves
        /tokenize)."""
        return path in self.routes_of(service) or not any(path in r for r in self.model_routes)
