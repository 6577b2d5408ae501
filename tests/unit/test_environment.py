"""Process-wide defaults set on `import poolserve`: POOLSERVE_CACHE_DIR reaches inductor's
kernel cache (torch fixes its cache directory the first time it looks, so it must be set
before), and a value the user set wins. Each case runs in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = (
    "import poolserve\n"
    "from torch._inductor.runtime.cache_dir_utils import cache_dir\n"
    "print(cache_dir())\n"
)


def inductor_cache_dir(env: dict[str, str]) -> Path:
    clean = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return Path(result.stdout.strip().splitlines()[-1])


def test_poolserve_cache_dir_holds_inductors_cache(tmp_path: Path) -> None:
    assert inductor_cache_dir({"POOLSERVE_CACHE_DIR": str(tmp_path)}) == tmp_path / "inductor"
    own = tmp_path / "own"
    chosen = {"POOLSERVE_CACHE_DIR": str(tmp_path), "TORCHINDUCTOR_CACHE_DIR": str(own)}
    assert inductor_cache_dir(chosen) == own
