"""The settings of the commands themselves, beside what they load and serve: which models
`serve` and `compile` take (MODEL arguments or a `--config` file), and whether `serve` or
`embed` runs on Ray (config/grammar.py puts each command's settings together)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from poolserve.config.fields import declared_flags, setting
from poolserve.errors import SettingError


@dataclass(frozen=True)
class ModelSources:
    """Where the models of `serve` and `compile` come from: one place, the MODEL arguments (or
    POOLSERVE_MODEL) or a file."""

    models: tuple[str, ...] = setting(
        (),
        positional=True,
        metavar="MODEL",
        help="local model directories or hub ids, served side by side (default: "
        "POOLSERVE_MODEL, else the bundled all-MiniLM-L6-v2)",
    )
    config: str | None = setting(
        None,
        metavar="FILE",
        help="a TOML, YAML or JSON file listing the models, each with its own settings (the "
        "docs' Several models page); the flags are the defaults of every entry",
    )


@dataclass(frozen=True)
class RayConfig:
    """Running a command on Ray: `serve` as a Ray Serve application of `replicas` engines,
    `embed` over `replicas` engine actors."""

    ray: bool = setting(
        False,
        help="run on Ray: serve the app as a Ray Serve application of --replicas engines, or "
        "embed the job's parts on --replicas engine actors",
    )
    replicas: int | None = setting(
        None, minimum=1, help="engines on Ray, one per actor (default: 1)"
    )
    replica_cpus: float | None = setting(
        None,
        number="positive",
        unit="CPUs",
        help="CPUs Ray reserves for each engine, which lays its runners out over them (default: 1)",
    )
    ray_address: str | None = setting(
        None,
        help="the Ray cluster to join (auto, or host:port of its head); default: start a Ray "
        "instance of this machine alone (node address 127.0.0.1) for as long as the command runs",
    )

    def checked(self) -> RayConfig:
        """As a command runs it: without `ray`, none of the others may be given (SettingError);
        with it, one replica of one CPU unless they say more."""
        if not self.ray:
            for each in declared_flags(RayConfig):
                if each.field.name != "ray" and getattr(self, each.field.name) is not None:
                    raise SettingError(f"argument {each.name} needs --ray")
            return self
        return replace(self, replicas=self.replicas or 1, replica_cpus=self.replica_cpus or 1.0)
