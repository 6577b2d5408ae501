"""`poolserve embed`: a corpus file in, its embeddings out, resumably (the job itself is
`bulk/`); exit 0 done, 1 when it cannot run or a bad row stops it."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from poolserve.config.fields import flag_values
from poolserve.config.grammar import model_engine_configs
from poolserve.config.job_config import JobInput, JobOptions
from poolserve.errors import (
    EngineUnavailableError,
    InvalidRequestError,
    ModelLoadError,
    SettingError,
)

logger = logging.getLogger("poolserve")


def embed(args: argparse.Namespace) -> int:
    """`poolserve embed`: exit 0 done, 1 when it cannot run or a bad row stops it."""
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    model_config, engine_config = model_engine_configs(args)
    if engine_config.compile == "auto":
        # A job pays for no compile (1,000 records: 117 s compiled, 20.6 s eager, at the same
        # records/s): it loads one from the cache (`poolserve compile`), else runs eagerly.
        engine_config = replace(engine_config, compile="cached")
    from poolserve.bulk.corpus import InputError, InputSpec
    from poolserve.bulk.job import BadRowsError, check_job, run_job, summary_lines
    from poolserve.bulk.parts import JobStateError
    from poolserve.offline.model_engine import Engine

    try:
        spec = InputSpec.of(JobInput(**flag_values(args, JobInput)))
        options = JobOptions(**flag_values(args, JobOptions))
        check_job(spec, Path(args.output), options)  # before any model loads
        if args.ray:
            from poolserve.bulk.job import PARTS_IN_FLIGHT
            from poolserve.ray.command_paths import embed_on_ray

            report = embed_on_ray(
                model_config,
                engine_config,
                # Every actor busy, and the next parts read and waiting.
                lambda embedder: run_job(
                    embedder,
                    spec,
                    Path(args.output),
                    options,
                    parts_in_flight=args.replicas + PARTS_IN_FLIGHT - 1,
                ),
                replicas=args.replicas,
                replica_cpus=args.replica_cpus,
                address=args.ray_address,
                resume=shlex.join(["poolserve", *sys.argv[1:]]),
            )
        else:
            with Engine(model_config=model_config, engine_config=engine_config) as engine:
                report = run_job(engine, spec, Path(args.output), options)
    except ImportError as exc:
        logger.error("poolserve embed: %s", exc)
        return 1
    except (
        InputError,
        JobStateError,
        BadRowsError,
        ModelLoadError,
        InvalidRequestError,
        EngineUnavailableError,  # (on Ray: no engine actor could be had)
    ) as exc:
        message = exc.cli_message if isinstance(exc, SettingError) else str(exc)
        logger.error("poolserve embed: %s", message)
        return 1
    for line in summary_lines(report):
        print(line)
    return 0
