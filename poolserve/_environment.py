"""Process-wide threading settings, applied before torch and tokenizers are first imported.

- OMP_WAIT_POLICY=PASSIVE: torch's OpenMP threads otherwise spin at every barrier. A server
  always has other threads wanting the CPU (event loop, CPU pool, other processes), and with
  spinning threads preempted mid-operator a forward pass was measured to take 50-100x longer on
  a busy 2-core machine; passive waiting costs little when the machine is idle.
- TOKENIZERS_PARALLELISM=false: requests are already spread over the CPU pool; the tokenizer
  must not fan out into a thread pool of its own.

- TORCHINDUCTOR_CACHE_DIR=`POOLSERVE_CACHE_DIR`/inductor: the compiled kernels' cache beside
  poolserve's own (backends/torch/aot.py). torch reads the variable once, the first time inductor
  looks for its cache, and then writes its own default into it, so it is set here, up front.

All are defaults: a value the user set in the environment wins. They only take effect if this
module runs before torch (or tokenizers) is imported, which `import poolserve` ensures unless
the caller imported torch first.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}


def cache_dir() -> Path:
    """Where poolserve keeps what it can reuse across restarts: `POOLSERVE_CACHE_DIR`, else
    ~/.cache/poolserve."""
    configured = os.environ.get("POOLSERVE_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "poolserve"


def apply_defaults() -> None:
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))
