"""Scale-out on Ray (`pip install 'poolserve[ray]'`): the same engine, tasks and HTTP app, one
engine per Ray actor. Ray places the actors and routes the work; poolserve adds no scheduler of
its own across machines.

- Ray Serve: `deployment(...)` is the HTTP app as a Ray Serve application of N replicas;
  `build_app` builds it from a Ray Serve config file's `args` (the `poolserve serve` flags).
- Ray Data: `embed_dataset(ds, ...)` adds an embedding column to a dataset with `map_batches`
  over a pool of engine actors.
- `poolserve serve --ray` and `poolserve embed --ray` run both from the command line.
"""

from __future__ import annotations

try:
    import ray  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("poolserve.ray needs Ray: pip install 'poolserve[ray]'") from exc

from poolserve.ray.data import embed_dataset
from poolserve.ray.replica import build_app, deployment

__all__ = ["build_app", "deployment", "embed_dataset"]
