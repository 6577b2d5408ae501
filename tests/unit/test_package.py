"""The package's shape: its exported names, torch behind its backend, modules and functions of a
readable size, and module names that do not collide."""

from __future__ import annotations

import ast
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import poolserve

PACKAGE = Path(poolserve.__file__).parent
SOURCES = sorted(PACKAGE.rglob("*.py"))
# The backends that load the model in torch: the torch backend, and the ONNX Runtime backend
# built on it (it exports the torch model and checks against it).
# The backends built on the torch backend (the graph runtimes load the model in torch).
TORCH_BACKENDS = tuple(
    PACKAGE / "backends" / name
    for name in ("torch_model", "torch", "graph", "onnxruntime", "openvino", "choice")
)
# The runtimes, peers that each compose the loaded model (backends/torch_model/) or, for a static
# model, its table; what the graph runtimes share is backends/graph/.
RUNTIMES = ("torch", "onnxruntime", "openvino", "static")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def relative(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def test_the_exported_names_are_the_public_face() -> None:
    assert sorted(poolserve.__all__) == [
        "Chunking",
        "Engine",
        "EngineConfig",
        "ModelConfig",
        "ModelSet",
        "ServedModel",
        "ServerConfig",
        "__version__",
    ]
    for name in poolserve.__all__:
        assert getattr(poolserve, name) is not None, name


def test_the_package_root_keeps_only_its_face() -> None:
    root = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert root == ["__init__.py", "__main__.py", "_environment.py", "_version.py", "errors.py"]


def imported_modules(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_torch_is_imported_only_under_the_torch_backends() -> None:
    importers = [
        relative(path)
        for path in SOURCES
        if not any(backend in path.parents for backend in TORCH_BACKENDS)
        and any(
            name == "torch" or name.startswith("torch.")
            for name in imported_modules(ast.parse(path.read_text(encoding="utf-8")))
        )
    ]
    assert importers == []


def poolserve_imports(folder: Path) -> dict[str, set[str]]:
    """The poolserve modules each module under `folder` imports (function-level ones too)."""
    return {
        relative(path): {
            name
            for name in imported_modules(ast.parse(path.read_text(encoding="utf-8")))
            if name.startswith("poolserve.")
        }
        for path in sorted(folder.rglob("*.py"))
    }


def reaching(imports: dict[str, set[str]], above: tuple[str, ...]) -> list[str]:
    """`module -> import` for each import of a module named among `above` (or under one)."""
    return [
        f"{module} -> {name}"
        for module, names in imports.items()
        for name in sorted(names)
        if any(name == each or name.startswith(each + ".") for each in above)
    ]


# What stands above the engine: the tasks, the runtimes, and everything that serves.
ABOVE_THE_ENGINE = (
    "poolserve.tasks",
    "poolserve.backends",
    "poolserve.service",
    "poolserve.admission",
    "poolserve.observe",
    "poolserve.serving",
    "poolserve.apis",
    "poolserve.server",
    "poolserve.tei_grpc",
    "poolserve.app",
    "poolserve.offline",
    "poolserve.bulk",
    "poolserve.ray",
    "poolserve.commands",
)
# The front ends: HTTP (the Batch API, an HTTP API, inside it), gRPC, the serving process that
# assembles them, the Python API, the bulk job and Ray.
FRONT_ENDS = ABOVE_THE_ENGINE[7:]


def test_the_engine_core_imports_no_task_runtime_or_front_end() -> None:
    assert reaching(poolserve_imports(PACKAGE / "engine"), ABOVE_THE_ENGINE) == []


def test_admission_imports_nothing_above_it() -> None:
    """Admission stands on the engine's floor: no task, runtime or model service, neither
    observability nor a front end."""
    above = tuple(name for name in ABOVE_THE_ENGINE if name != "poolserve.admission")
    assert reaching(poolserve_imports(PACKAGE / "admission"), above) == []


def test_observability_imports_no_front_end() -> None:
    assert reaching(poolserve_imports(PACKAGE / "observe"), FRONT_ENDS) == []


def test_the_api_families_import_no_front_end() -> None:
    """HTTP and gRPC both stand on the families' declarations; neither is beneath them."""
    assert reaching(poolserve_imports(PACKAGE / "apis"), FRONT_ENDS) == []


def test_http_and_grpc_import_nothing_of_each_other() -> None:
    """The two protocols are peers over the serving step and the API families; the serving
    process's factory (app/) alone knows both."""
    assert reaching(poolserve_imports(PACKAGE / "tei_grpc"), ("poolserve.server",)) == []
    assert reaching(poolserve_imports(PACKAGE / "server"), ("poolserve.tei_grpc",)) == []


def test_no_front_end_imports_another() -> None:
    """HTTP (with the Batch API), gRPC, the Python API and the bulk job stand side by side; what
    composes them stands above: the serving process's factory (app/), Ray (which deploys the
    HTTP app and runs bulk parts on Python engines) and the commands."""
    peers = ("server", "tei_grpc", "offline", "bulk")
    crossings = [
        crossing
        for peer in peers
        for crossing in reaching(
            poolserve_imports(PACKAGE / peer),
            tuple(f"poolserve.{other}" for other in peers if other != peer),
        )
    ]
    assert crossings == []


def test_the_serving_step_imports_no_front_end() -> None:
    """Every front end drives it; it knows none of them (no ASGI scope, no gRPC context)."""
    assert reaching(poolserve_imports(PACKAGE / "serving"), FRONT_ENDS) == []


def test_no_runtime_imports_another() -> None:
    crossings = [
        crossing
        for runtime in RUNTIMES
        for crossing in reaching(
            poolserve_imports(PACKAGE / "backends" / runtime),
            tuple(f"poolserve.backends.{other}" for other in RUNTIMES if other != runtime),
        )
    ]
    assert crossings == []


def test_the_loaded_model_and_the_graphs_import_no_runtime() -> None:
    """What the runtimes share stands below them all, the chooser above them."""
    below = {**poolserve_imports(PACKAGE / "backends" / "torch_model")}
    below.update(poolserve_imports(PACKAGE / "backends" / "graph"))
    above = (*(f"poolserve.backends.{name}" for name in RUNTIMES), "poolserve.backends.choice")
    assert reaching(below, above) == []


# Run in a process of its own, where `import torch` fails: every module but the torch backends'
# imports, and the bundled model is described and its tasks built without torch.
WITHOUT_TORCH = """
import importlib, pkgutil, sys
sys.modules["torch"] = None
import poolserve
for module in pkgutil.walk_packages(poolserve.__path__, "poolserve."):
    if not module.name.startswith(
        (
            "poolserve.backends.torch_model",
            "poolserve.backends.torch",
            "poolserve.backends.graph",
            "poolserve.backends.onnxruntime",
            "poolserve.backends.openvino",
            "poolserve.backends.choice",
            "poolserve.__main__",
        )
    ):
        importlib.import_module(module.name)
from poolserve.config import ModelConfig
from poolserve.models.describe import prepare_model
from poolserve.tasks.task_set import build_tasks
spec = prepare_model(ModelConfig())
tasks = build_tasks(spec, max_input_tokens=1024)
print(spec.name, spec.kind, spec.max_model_len, ",".join(tasks.heads))
"""


def test_every_module_but_the_torch_backends_works_without_torch() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH],
        capture_output=True,
        text=True,
        timeout=120,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "sentence-transformers/all-MiniLM-L6-v2",
        "embedding",
        "256",
        "embed,token_embed",
    ]


def test_no_module_or_function_is_too_long_to_read() -> None:
    too_long: list[str] = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            too_long.append(f"{relative(path)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{relative(path)}:{node.lineno} {node.name}: {length} lines")
    assert too_long == []


def a_letter_apart(first: str, second: str) -> bool:
    """Equal, or one letter added, dropped or changed."""
    if first == second:
        return True
    if len(first) == len(second):
        return sum(a != b for a, b in zip(first, second, strict=True)) == 1
    shorter, longer = sorted((first, second), key=len)
    if len(longer) - len(shorter) != 1:
        return False
    return any(longer[:i] + longer[i + 1 :] == shorter for i in range(len(longer)))


def test_no_two_modules_have_names_a_letter_apart() -> None:
    """`service.py` beside `services.py`, or two `layout.py`, made the reader ask which is
    which; a package is named by its folder."""
    names = {
        relative(path): (path.parent.name if path.stem == "__init__" else path.stem)
        for path in SOURCES
        if path.stem != "__main__"
    }
    clashes = [
        f"{first} ~ {second}"
        for (first, a), (second, b) in combinations(sorted(names.items()), 2)
        if a_letter_apart(a, b)
    ]
    assert clashes == []
