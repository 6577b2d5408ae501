"""Process-wide threading settings, applied before torch and tokenizers are first imported.

- OMP_WAIT_POLICY=PASSIVE: torch's OpenMP threads otherwise spin at every barrier. A server
  always has other threads wanting the CPU (event loop, CPU pool, other processes), and with
  spinning threads preempted mid-operator a forward pass was measured to take 50-100x longer on
  a busy 2-core machine; passive waiting costs little when the machine is idle.
- TOKENIZERS_PARALLELISM=false: requests are already spread over the CPU pool; the tokenizer
  must not fan out into a thread pool of its own.

Both are defaults: a value the user set in the environment wins. They only take effect if this
module runs before torch (or tokenizers) is imported, which `import poolserve` ensures unless
the caller imported torch first.
"""

from __future__ import annotations

import os

DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}


def apply_defaults() -> None:
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)
