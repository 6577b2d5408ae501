"""The garbage collector set for serving, once a server has loaded: start-up's objects out of
its way, and its young generation collected less often.

Everything loaded before serving (torch, transformers, the model: ~400k objects) lives until
exit. Left in the collected generations, each full collection walks it all: ~200 ms with every
request stalled, about once a second under load (the p99 the soak benchmark showed). Frozen,
collections walk only what requests allocate.

A request allocates a few hundred container objects on its way through (scope, coroutines,
futures, its context). With CPython's default threshold (700 allocations), the young
generation is collected every few requests, and each collection walks the objects of every
request still in flight: 6-7 % of the event loop's CPU under 64 one-sentence clients (`perf` on
its thread). Collected every YOUNG_OBJECTS allocations instead, most of what a request allocated
is freed (by reference counting) before a collection sees it; the older generations keep
CPython's cadence. Garbage in a reference cycle waits longer for a collection, so what a
request holds is never left in one: a failing stage (engine/cpu_pool.py) and a refused body
(server/body.py) let go of what they hold, and their tests check it with the collector off.
"""

from __future__ import annotations

import gc

# Net allocations of container objects between two young-generation collections (CPython's
# default: 700; 50,000 saved 2 µs more a request, but lets cyclic garbage wait 5× longer); then,
# as CPython does, every OLDER_EVERY of those collect the middle generation too, and a full one
# follows every FULL_EVERY middle ones once a quarter of the long-lived objects are new.
YOUNG_OBJECTS = 10_000
OLDER_EVERY = 10
FULL_EVERY = 10


def freeze_loaded_objects() -> None:
    """Move every object alive now to the permanent generation, and collect the young one less
    often (`poolserve serve` before it listens, each Ray Serve replica once its app is
    built)."""
    gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, OLDER_EVERY, FULL_EVERY)
