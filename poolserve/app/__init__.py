"""The serving process assembled: `create_app` builds what every front end shares (the serving
state: models, admission, metrics, tracing, the grace period) and the front ends over it, HTTP
(server/) with the Batch API, and gRPC (tei_grpc/) where `--grpc-port` asks, started and stopped
with the HTTP app's lifespan. The one place that knows both front ends."""

from poolserve.app.factory import create_app

__all__ = ["create_app"]
