"""The build step pyproject.toml cannot declare: the gRPC message stubs of text-embeddings-
inference's protocol (`poolserve/tei_grpc/proto/tei.proto`, vendored) are generated from
it at build and install time by grpcio-tools' protoc, never written by hand or checked in."""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PROTO_DIR = Path("poolserve/tei_grpc/proto")
STUBS = Path("poolserve/tei_grpc/stubs")


def generate_stubs(out: Path) -> None:
    """`tei_pb2.py` and its type stub `tei_pb2.pyi` in `out`, registered as `tei.proto` (the
    name TEI's own server and the clients generated from the file give it)."""
    from grpc_tools import protoc  # a build requirement (pyproject.toml)

    out.mkdir(parents=True, exist_ok=True)
    command = [
        "protoc",
        f"--proto_path={PROTO_DIR}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        str(PROTO_DIR / "tei.proto"),
    ]
    if protoc.main(command) != 0:
        raise RuntimeError(f"protoc could not compile {PROTO_DIR / 'tei.proto'}")


class BuildWithStubs(build_py):
    def run(self) -> None:
        super().run()
        # An editable install imports the package from the source tree: the stubs go there.
        editable = getattr(self, "editable_mode", False)
        generate_stubs(STUBS if editable else Path(self.build_lib) / STUBS)


setup(cmdclass={"build_py": BuildWithStubs})
