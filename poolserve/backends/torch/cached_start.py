"""A restart served from the compile cache alone: where the caches hold all that a start decides
for the main head (the precision `--dtype auto` chose, the batch layout: a packed library is
built only once packing passed its check, a library for every thread count a runner uses and,
but with `--compile on`, that each pays), the libraries, which hold the weights, serve it, and
neither transformers' model code nor the weights are loaded (deferred_module.py builds the eager
module at its first call)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from poolserve.backends.torch import aot, compile_gain
from poolserve.backends.torch.aot import AotRun
from poolserve.backends.torch_model import precision
from poolserve.backends.torch_model.executor import CompiledForward
from poolserve.backends.torch_model.forward_cache import ForwardTarget
from poolserve.config import CompileMode
from poolserve.config.model_config import PackingMode
from poolserve.engine.model_backend import PrecisionReport
from poolserve.models.spec import ModelSpec


@dataclass(frozen=True)
class CachedStart:
    """What the caches decided for the main head, and its libraries, loaded."""

    spec: ModelSpec  # its dtype as chosen
    precision: PrecisionReport | None  # how `auto` chose it (None: asked for)
    gains: dict[int, compile_gain.Gain]
    forward: CompiledForward


@dataclass(frozen=True)
class StartSettings:
    """The backend's settings a start decides by."""

    threads: int
    runners: int
    max_batch_size: int
    packing: PackingMode
    compile: CompileMode


def cached_start(
    root: Path, spec: ModelSpec, settings: StartSettings, callers: int
) -> CachedStart | None:
    """The main head's compiled forward from the caches alone, run by `callers` threads at once
    (the runners and the express runner), or None where a start must load the model (something
    is missing, or a thread count does not pay)."""
    chosen = None
    if spec.dtype == "auto":
        chosen = precision.cached_choice(precision.cache_file(root, spec, settings.threads))
        if chosen is None:
            return None
        spec = replace(spec, dtype=chosen.dtype)
    counts = sorted({1, settings.threads, settings.threads * settings.runners})
    # A cross-encoder's libraries take token types or not, as its backbone does: whichever
    # the cache holds (one key never holds both).
    for with_types in (True, False) if spec.kind == "cross_encoder" else (False,):
        targets = [
            ForwardTarget(
                spec.heads[0], count, with_types, settings.max_batch_size, settings.packing != "off"
            )
            for count in counts
        ]
        gains = _paying_gains(root, spec, targets, settings.compile)
        if gains is None:
            continue
        try:
            loaded = aot.load_or_build(root, None, spec, targets, callers)
        except aot.NotInCacheError:
            continue
        runs = {count: AotRun(model, with_types) for count, model in loaded.runs.items()}
        forward = CompiledForward(runs, spec.heads[0], targets[0].packed)
        return CachedStart(spec, chosen, gains, forward)
    return None


def _paying_gains(
    root: Path, spec: ModelSpec, targets: Sequence[ForwardTarget], compile: CompileMode
) -> dict[int, compile_gain.Gain] | None:
    """Each target's measured gain, or None where one is unmeasured or does not pay (with
    `--compile on`, whatever is known: it compiles regardless)."""
    gains = {
        target.threads: compile_gain.cached_gain(compile_gain.gain_file(root, spec, target))
        for target in targets
    }
    known = {count: gain for count, gain in gains.items() if gain is not None}
    if compile == "on":
        return known
    if len(known) < len(targets) or not all(gain.pays for gain in known.values()):
        return None
    return known
