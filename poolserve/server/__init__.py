"""The HTTP front end: a thin async adapter over the serving step (serving/) and the API
families (apis/); `create_app` is the serving process's factory, which starts the gRPC front
end beside it when asked."""

from poolserve.server.app import create_app

__all__ = ["create_app"]
