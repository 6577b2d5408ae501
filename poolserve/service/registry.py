"""The loaded models by the names they are served under, on one CPU pool: what the server
serves, and what the Python API's `ModelSet` wraps. Each model has its own scheduler and
runners.

How the cores are shared: each model's runners are laid over all the cores, as if it were alone.
A model with nothing to do costs no CPU (its runners wait on their scheduler's condition), so a
model alone under load has every core; when several are busy, the operating system shares the
cores between their runner threads, about evenly per thread, and no model waits for another's
batches. To split the cores otherwise, give each model its own `runners` and `torch_threads`.
Tokenizing and response building for every model share the one pool, in arrival order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

from poolserve.config import EngineConfig, ModelConfig, ServedModel
from poolserve.engine.cpu_pool import CpuPool
from poolserve.engine.model_backend import BackendFactory
from poolserve.errors import ModelLoadError, ModelNotFoundError, SettingError, echoed
from poolserve.service.model_service import ModelService

DEFAULT_MODEL_LABEL = "the bundled default model"


class ServiceRegistry:
    """Loaded models by the names they are served under; thread-safe, close it when done."""

    def __init__(
        self,
        services: Sequence[ModelService],
        configs: Sequence[ServedModel],
        cpu: CpuPool | None,
    ) -> None:
        """Use `load` (or `serving`); `cpu` is the pool this set owns (None: owned elsewhere)."""
        self.services = tuple(services)
        self.configs = tuple(configs)
        self._cpu = cpu
        self._by_name: dict[str, ModelService] = {}
        for index, service in enumerate(self.services):
            for name in service.served_names:
                if name in self._by_name:
                    raise SettingError(
                        f"{label(index, self.configs[index])} is served as {name!r}, as another "
                        "model is; give them different --served-model-name"
                    )
                self._by_name[name] = service

    @classmethod
    def load(
        cls,
        models: str | Path | Sequence[ServedModel | str | None],
        *,
        cpu_workers: int | None = None,
        backend: BackendFactory | None = None,
    ) -> Self:
        """Load every model (a model file's path, or a list of models: `ServedModel`s, paths
        or hub ids, None for the bundled default) on one CPU pool of `cpu_workers` threads
        (default: one per core): `prepare`, then `start`."""
        registry = cls.prepare(models, cpu_workers=cpu_workers, backend=backend)
        registry.start()
        return registry

    @classmethod
    def prepare(
        cls,
        models: str | Path | Sequence[ServedModel | str | None],
        *,
        cpu_workers: int | None = None,
        backend: BackendFactory | None = None,
    ) -> Self:
        """Every model prepared (described, its tasks built, its settings checked: nothing
        loaded, no thread started), so that a setting that cannot work stops start-up in
        seconds, named in the error, with nothing left running."""
        configs = served_models(models)
        check_names(configs)
        cpu = CpuPool(cpu_workers or EngineConfig().cpu_workers)
        services: list[ModelService] = []
        try:
            for index, config in enumerate(configs):
                with _named(index, config):
                    services.append(
                        ModelService.prepare(
                            config.model,
                            config.engine,
                            served_names=config.served_names,
                            backend=backend,
                            cpu=cpu,
                        )
                    )
            return cls(services, configs, cpu)  # refuses two models served under one name
        except BaseException:
            for service in services:
                service.close()
            cpu.shutdown(wait=True)  # no thread of it has started
            raise

    def start(self) -> None:
        """Load every model, in order; one that fails closes them all and is raised, named."""
        try:
            for index, (config, service) in enumerate(zip(self.configs, self, strict=True)):
                with _named(index, config):
                    service.start()
        except BaseException:
            self.close(timeout=1.0)
            raise

    @classmethod
    def serving(cls, service: ModelService, config: ServedModel | None = None) -> Self:
        """One model that its owner (an `Engine`) loaded and closes."""
        return cls([service], [config or ServedModel()], None)

    # -- lookup -----------------------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a model is served under, in the models' order."""
        return tuple(self._by_name)

    @property
    def first(self) -> ModelService:
        return self.services[0]

    @property
    def cpu(self) -> CpuPool:
        """The pool every model tokenizes and builds responses in."""
        return self.services[0].core.cpu

    def find(self, name: str) -> ModelService:
        """The model served as `name`; ModelNotFoundError lists the served names."""
        service = self._by_name.get(name)
        if service is None:
            raise ModelNotFoundError(
                f"model {echoed(name)!r} is not served here; this server serves "
                + ", ".join(repr(each) for each in self._by_name),
                param="model",
            )
        return service

    def config_of(self, service: ModelService) -> ServedModel:
        """The settings `service` was loaded with."""
        return self.configs[self.services.index(service)]

    def __iter__(self) -> Iterator[ModelService]:
        return iter(self.services)

    def __len__(self) -> int:
        return len(self.services)

    @property
    def alive(self) -> bool:
        """True while every model can serve."""
        return all(service.alive for service in self.services)

    # -- lifecycle --------------------------------------------------------------------------

    def close(self, timeout: float | None = None) -> bool:
        """Finish admitted work and stop every model's threads, then the pool; with a
        `timeout` (seconds, for the whole close), False if a runner was left behind."""
        if self._cpu is None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        closed = True
        for service in self.services:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            closed = service.core.close(left) and closed
        self._cpu.shutdown(wait=closed)
        return closed

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def served_models(models: str | Path | Sequence[ServedModel | str | None]) -> list[ServedModel]:
    """The models to load: a model file's entries (over the Python defaults), or the list."""
    if isinstance(models, str | Path):
        from poolserve.config.model_file import base_settings, read_model_file

        return read_model_file(models, base_settings(ModelConfig(), EngineConfig()))
    configs = [
        each if isinstance(each, ServedModel) else ServedModel(ModelConfig(model=each))
        for each in models
    ]
    if not configs:
        raise SettingError("no models given; pass at least one")
    return configs


def check_names(configs: Sequence[ServedModel]) -> None:
    """Refuse two models served under one name (only names given here can be checked before
    loading; a model's own id is checked once it is known)."""
    seen: dict[str, int] = {}
    for index, config in enumerate(configs):
        for name in config.served_names or (config.model.model or DEFAULT_MODEL_LABEL,):
            if name in seen:
                raise SettingError(
                    f"{label(index, config)} and {label(seen[name], configs[seen[name]])} are "
                    f"both served as {name!r}; give them different --served-model-name"
                )
            seen[name] = index


def label(index: int, config: ServedModel) -> str:
    """How an error names a model: its place in the list and what it is."""
    return f"model {index + 1} ({config.model.model or DEFAULT_MODEL_LABEL})"


@contextmanager
def _named(index: int, config: ServedModel) -> Iterator[None]:
    """A model's refusal names the model (`model 2 (BAAI/bge-m3): ...`)."""
    try:
        yield
    except SettingError as exc:
        raise SettingError(f"{label(index, config)}: {exc.cli_message}") from exc
    except ModelLoadError as exc:
        raise ModelLoadError(f"{label(index, config)}: {exc}") from exc
