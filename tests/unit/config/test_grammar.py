"""The commands' grammar: flags and POOLSERVE_* environment variables build the configs, every
value checked in one line."""

from __future__ import annotations

import argparse
import re
from dataclasses import replace

import pytest

from poolserve import __version__
from poolserve.commands import main
from poolserve.config import EngineConfig, ModelConfig, ServerConfig
from poolserve.config.grammar import build_parser, configs_from_args, parse_args


def configs(*argv: str) -> tuple[ModelConfig, EngineConfig, ServerConfig]:
    # The parser reads the environment when it is built, so build it after setting env vars.
    return configs_from_args(parse_args(["serve", *argv]))


def test_defaults_are_the_dataclass_defaults_but_the_server_compiles_and_chooses() -> None:
    """Only --compile, --backend and --express-runner differ: a server compiles where it can,
    measures the engines and keeps an express runner; the Python API when asked."""
    assert configs() == (
        ModelConfig(),
        replace(EngineConfig(), compile="auto", backend="auto", express_runner=True),
        ServerConfig(),
    )


def test_flags() -> None:
    model, engine, server = configs(
        "/models/mine",
        "--host", "0.0.0.0",
        "--port", "9001",
        "--served-model-name", "first", "second",
        "--log-level", "debug",
        "--access-log",
        "--revision", "v2",
        "--dtype", "bfloat16",
        "--device", "cpu",
        "--max-model-len", "128",
        "--max-batch-tokens", "4096",
        "--max-batch-size", "16",
        "--cpu-workers", "3",
        "--torch-threads", "1",
        "--runners", "3",
        "--compile", "off",
    )  # fmt: skip
    assert model == ModelConfig(
        model="/models/mine", revision="v2", dtype="bfloat16", device="cpu", max_model_len=128
    )
    assert engine == EngineConfig(
        max_batch_tokens=4096,
        max_batch_size=16,
        cpu_workers=3,
        torch_threads=1,
        runners=3,
        compile="off",
        backend="auto",
        express_runner=True,
    )
    assert server == ServerConfig(
        host="0.0.0.0",
        port=9001,
        served_model_name=("first", "second"),
        log_level="debug",
        access_log=True,
    )


ENV = {
    "POOLSERVE_MODEL": "org/model",
    "POOLSERVE_HOST": "::",
    "POOLSERVE_PORT": "8123",
    "POOLSERVE_SERVED_MODEL_NAME": "alpha, beta gamma",
    "POOLSERVE_LOG_LEVEL": "warning",
    "POOLSERVE_ACCESS_LOG": "yes",
    "POOLSERVE_REVISION": "main",
    "POOLSERVE_DTYPE": "float32",
    "POOLSERVE_DEVICE": "cpu",
    "POOLSERVE_MAX_MODEL_LEN": "64",
    "POOLSERVE_MAX_BATCH_TOKENS": "2048",
    "POOLSERVE_MAX_BATCH_SIZE": "8",
    "POOLSERVE_CPU_WORKERS": "5",
    "POOLSERVE_TORCH_THREADS": "2",
    "POOLSERVE_RUNNERS": "4",
    "POOLSERVE_COMPILE": "on",
}


def test_length_buckets_are_on_by_default_and_off_turns_them_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert configs()[1].bucket_padding_tokens == 32
    assert configs("--bucket-padding-tokens", "0")[1].bucket_padding_tokens == 0
    assert configs("--bucket-padding-tokens", "off")[1].bucket_padding_tokens is None
    monkeypatch.setenv("POOLSERVE_BUCKET_PADDING_TOKENS", "off")
    assert configs()[1].bucket_padding_tokens is None
    with pytest.raises(SystemExit):
        configs("--bucket-padding-tokens", "never")


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    model, engine, server = configs()
    assert model == ModelConfig(
        model="org/model", revision="main", dtype="float32", device="cpu", max_model_len=64
    )
    assert engine == EngineConfig(
        max_batch_tokens=2048,
        max_batch_size=8,
        cpu_workers=5,
        torch_threads=2,
        runners=4,
        compile="on",
        backend="auto",
        express_runner=True,
    )
    assert server == ServerConfig(
        host="::",
        port=8123,
        served_model_name=("alpha", "beta", "gamma"),
        log_level="warning",
        access_log=True,
    )


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    model, engine, server = configs(
        "/other", "--port", "7000", "--no-access-log", "--dtype", "auto", "--max-batch-size", "4"
    )
    assert model.model == "/other"
    assert model.dtype == "auto"
    assert server.port == 7000
    assert server.access_log is False
    assert engine.max_batch_size == 4
    assert engine.max_batch_tokens == 2048  # not given as a flag: still from the environment


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("on", True), ("0", False)])
def test_boolean_environment_values(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: bool
) -> None:
    monkeypatch.setenv("POOLSERVE_ACCESS_LOG", value)
    assert configs()[2].access_log is expected


@pytest.mark.parametrize(
    "argv",
    [["--dtype", "float8"], ["--device", "tpu"], ["--port", "eighty"], ["--max-batch-size", "x"]],
)
def test_invalid_flags_exit_with_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        configs(*argv)
    assert caught.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_an_abbreviated_flag_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """`--max-batch-token 100` would otherwise set --max-batch-tokens without a word."""
    with pytest.raises(SystemExit) as caught:
        configs("--max-batch-token", "100")
    assert caught.value.code == 2
    assert "unrecognized arguments: --max-batch-token" in capsys.readouterr().err


def test_a_command_is_required() -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args([])
    assert caught.value.code == 2


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["--version"])
    assert caught.value.code == 0
    assert __version__ in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--max-queued-tokens", "1000"], "--max-client-batch-size 2048 inputs cost at least 8192"),
        (["--max-client-batch-size", "600", "--max-request-tokens", "2000"], "at least 2400"),
        (["--max-queued-tokens", "100000", "--max-request-tokens", "60000"], "more than half"),
    ],
)
def test_limits_that_do_not_fit_together_are_refused_in_one_line(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        configs(*argv)
    assert caught.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert problem in error


@pytest.mark.parametrize(
    ("argv", "accepted"),
    [
        (["--port", "99999"], "an integer from 1 to 65535"),
        (["--port", "0"], "an integer from 1 to 65535"),
        (["--max-model-len", "0"], "an integer from 1 up"),
        (["--max-client-batch-size", "0"], "an integer from 1 up"),
        (["--max-concurrent-requests", "0"], "an integer from 1 up"),
        (["--max-queued-tokens", "0"], "an integer from 1 up"),
        (["--max-request-bytes", "-5"], "an integer from 1 up"),
        (["--request-timeout", "0"], "a number of seconds above 0"),
        (["--request-timeout", "nan"], "a number of seconds above 0"),
        (["--max-batch-size", "0"], "an integer from 1 up"),
        (["--max-batch-tokens", "0"], "an integer from 1 up"),
        (["--shutdown-timeout", "-1"], "an integer from 0 up"),
        (["--torch-threads", "0"], "an integer from 1 up"),
        (["--runners", "0"], "an integer from 1 up"),
        (["--cpu-workers", "0"], "an integer from 1 up"),
        (["--single-thread-tokens", "-1"], "an integer from 0 up"),
        (["--replica-cpus", "0", "--ray"], "a number of CPUs above 0"),
        (["--replicas", "0", "--ray"], "an integer from 1 up"),
        (["--log-level", "foo"], "one of critical, error, warning, info, debug"),
        # `token_embed` is a /pooling head an embedding model has too, not a kind of model.
        (["--task", "token_embed"], "one of auto, embedding, cross_encoder, classifier, late_"),
    ],
)
def test_settings_out_of_range_are_refused_in_one_line(
    argv: list[str], accepted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        configs(*argv)
    assert caught.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    assert f"argument {argv[0]}: {argv[1]!r} is not {accepted}" in error, error


def test_a_bad_variable_is_named_and_a_flag_overrides_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POOLSERVE_PORT", "99999")
    monkeypatch.setenv("POOLSERVE_DTYPE", "float8")
    with pytest.raises(SystemExit):
        configs()
    error = capsys.readouterr().err
    assert "POOLSERVE_PORT='99999' is not an integer from 1 to 65535" in error, error
    assert error.rstrip().endswith("(see poolserve serve --help)"), error  # the command's help
    model, _, server = configs("--port", "9000", "--dtype", "float32")
    assert (server.port, model.dtype) == (9000, "float32")
    with pytest.raises(SystemExit) as caught:  # --version never reads the variables
        parse_args(["--version"])
    assert caught.value.code == 0


@pytest.mark.parametrize("value", ["maybe", "2", ""])
def test_a_boolean_variable_must_say_yes_or_no(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    monkeypatch.setenv("POOLSERVE_ACCESS_LOG", value)
    with pytest.raises(SystemExit) as caught:
        configs()
    assert caught.value.code == 2
    error = capsys.readouterr().err
    assert f"POOLSERVE_ACCESS_LOG={value!r} is not a boolean" in error, error
    assert configs("--no-access-log")[2].access_log is False


def test_serve_help_shows_every_default_and_explains_every_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse_args(["serve", "--help"])
    text = capsys.readouterr().out
    for flag in ("--host", "--port", "--log-level", "--device", "--revision", "--access-log"):
        assert flag in text
    serve = next(
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    ).choices["serve"]
    undocumented = [
        action.option_strings or action.dest
        for action in serve._actions
        if not action.help and action.dest != "help"
    ]
    assert undocumented == []
    assert "(default: 8000)" in text and "(default: 262144)" in text


def test_embed_help_explains_the_bulk_job(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_args(["embed", "--help"])
    assert caught.value.code == 0
    text = capsys.readouterr().out
    for words in (
        "JSONL",
        "Parquet",
        "SIGKILL",
        "--overwrite",
        "--text-field",
        "--id-field",
        "--on-error",
        "--truncate",
        "errors.jsonl",
    ):
        assert words in text, words


def test_embed_without_an_output_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_args(["embed", "corpus.jsonl"])
    assert caught.value.code == 2
    assert "--output" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["serve"], ["embed", "in.jsonl", "-o", "out.parquet"]])
@pytest.mark.parametrize(
    "flag", [["--replicas", "2"], ["--replica-cpus", "2"], ["--ray-address", "auto"]]
)
def test_ray_flags_without_ray_are_refused(
    command: list[str], flag: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_args([*command, *flag])
    assert caught.value.code == 2
    assert f"argument {flag[0]} needs --ray" in capsys.readouterr().err


def test_ray_flags_default_with_ray() -> None:
    args = parse_args(["serve", "--ray"])
    assert (args.ray, args.replicas, args.replica_cpus, args.ray_address) == (True, 1, 1.0, None)


def test_prompts_from_flags_and_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    model = configs("--prompt", "query=query: ", "--prompt", "doc=a=b, c")[0]
    assert model.prompts == (("query", "query: "), ("doc", "a=b, c"))
    monkeypatch.setenv("POOLSERVE_PROMPT", "query=search_query: \ndocument=search_document: ")
    from_env = configs()[0]
    assert from_env.prompts == (("query", "search_query: "), ("document", "search_document: "))
    assert configs("--prompt", "q=x")[0].prompts == (("q", "x"),)  # a flag wins


@pytest.mark.parametrize("value", ["query", "=text"])
def test_a_prompt_without_a_name_is_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        configs("--prompt", value)
    assert f"argument --prompt: '{value}' is not NAME=TEXT" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["serve", "embed", "compile"])
def test_help_states_each_default_once(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text
    flags = re.split(r"\s(?=--[a-z])", text)
    for flag in flags:
        assert flag.count("default") <= 1 or "POOLSERVE_" in flag, flag
    assert "(default: 256)" in text  # a default the help does not state is still shown
