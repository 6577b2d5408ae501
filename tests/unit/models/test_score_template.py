"""Score templates of LLM rerankers: filling a pair in, and the one-line refusals of a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poolserve.errors import ModelLoadError, SettingError
from poolserve.models.score_template import (
    QWEN3_RERANKER,
    read_score_template,
    template_for,
    with_token_ids,
)


def test_fill_puts_the_pair_in_one_pass() -> None:
    """A query holding the text `{document}` is not filled a second time."""
    parts = QWEN3_RERANKER.fill("what is {document}?", "a {query} doc")
    assert parts[1] == (
        f"<Instruct>: {QWEN3_RERANKER.instruction}\n<Query>: what is {{document}}?\n"
        "<Document>: a {query} doc"
    )
    assert parts[0] == QWEN3_RERANKER.segments[0] and parts[2] == QWEN3_RERANKER.segments[2]


def test_a_template_file_reads_like_the_built_in_one(tmp_path: Path) -> None:
    path = tmp_path / "qwen.json"
    path.write_text(
        json.dumps(
            {
                "segments": list(QWEN3_RERANKER.segments),
                "yes": "yes",
                "no": "no",
                "instruction": QWEN3_RERANKER.instruction,
            }
        )
    )
    template = read_score_template(path)
    assert template.fill("q", "d") == QWEN3_RERANKER.fill("q", "d")
    assert (template.yes, template.no) == ("yes", "no")


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", "cannot read it"),
        ("[]", "a JSON object"),
        ('{"segments": ["{query} {document}"], "yes": "y", "extra": 1}', "unknown key 'extra'"),
        ('{"segments": "{query} {document}", "yes": "y"}', "list of strings"),
        ('{"segments": ["{query}"], "yes": "y"}', "no segment holds {document}"),
        ('{"segments": ["{query} {document}"]}', "`yes` must name"),
        ('{"segments": ["{query} {document}"], "yes": "y", "no": 3}', "`no` must be"),
    ],
)
def test_a_template_file_that_cannot_work_is_refused_in_one_line(
    tmp_path: Path, content: str, words: str
) -> None:
    path = tmp_path / "template.json"
    path.write_text(content)
    with pytest.raises(SettingError, match="score_template") as raised:
        read_score_template(path)
    assert words in str(raised.value) and "\n" not in str(raised.value)
    assert raised.value.cli_message.startswith("--score-template")


def test_a_family_without_a_template_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(SettingError, match="score_template FILE") as raised:
        template_for("llama", None, tmp_path)
    assert "--score-template FILE" in raised.value.cli_message and "qwen3" in str(raised.value)


def test_yes_and_no_must_each_be_one_token() -> None:
    vocabulary = {"yes": [7], "no": [8, 9]}
    with pytest.raises(ModelLoadError, match="'no' is 2 tokens"):
        with_token_ids(QWEN3_RERANKER, vocabulary.__getitem__)
    assert with_token_ids(QWEN3_RERANKER, {"yes": [7], "no": [8]}.__getitem__).token_ids == (7, 8)
