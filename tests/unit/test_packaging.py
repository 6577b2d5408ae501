"""The build metadata: an SPDX license expression (setuptools drops the table form after
2027-02-18) and a build backend pinned to a range that reads it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_license_is_an_spdx_expression_and_the_backend_is_pinned() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    assert project["project"]["license"] == "Apache-2.0"
    backend, protoc = [Requirement(r) for r in project["build-system"]["requires"]]
    # grpcio-tools' protoc generates the gRPC message stubs at build time (setup.py), pinned:
    # the stubs it writes need a protobuf runtime at least as new as itself.
    assert protoc.name == "grpcio-tools" and str(protoc.specifier).startswith("==")
    assert backend.name == "setuptools"
    assert not backend.specifier.contains(Version("76.0")), "PEP 639 needs setuptools >= 77"
    assert not backend.specifier.contains(Version("1000")), "no upper bound"
