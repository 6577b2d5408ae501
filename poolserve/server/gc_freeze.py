"""Start-up's objects out of the garbage collector's way, once a server has loaded.

Everything loaded before serving (torch, transformers, the model: ~400k objects) lives until
exit. Left in the collected generations, each full collection walks it all: ~200 ms with every
request stalled, about once a second under load (the p99 the soak benchmark showed). Frozen,
collections walk only what requests allocate.
"""

from __future__ import annotations

import gc


def freeze_loaded_objects() -> None:
    """Move every object alive now to the permanent generation (`poolserve serve` before it
    listens, each Ray Serve replica once its app is built)."""
    gc.freeze()
