"""Small requests' preparations waiting for a runner (engine/preparations.py): taken higher
lanes first, all of them or (for the express runner) those of the default lane and above only,
their inputs counted by lane as they wait."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from poolserve.engine.preparations import Preparation, Preparations, run_all


def noted(name: str, ran: list[str], texts: tuple[str, ...] = ()) -> Preparation:
    return Preparation(ran.append, (name,), lambda: None, texts)


def test_the_express_runner_takes_the_default_lane_and_above_and_leaves_the_rest() -> None:
    waiting, ran = Preparations(), []
    for priority, inputs, name in [(5, 3, "bulk"), (0, 1, "query"), (-2, 2, "urgent")]:
        waiting.add(priority, inputs, noted(name, ran))
    waiting.add(0, 1, noted("second query", ran))
    assert waiting.has_foreground()
    run_all(waiting.take(foreground_only=True))
    assert ran == ["urgent", "query", "second query"]
    assert dict(waiting.inputs) == {5: 3} and waiting.total_inputs == 3
    assert not waiting.has_foreground() and waiting
    assert waiting.take(foreground_only=True) == []
    run_all(waiting.take())
    assert ran[-1] == "bulk" and not waiting and waiting.total_inputs == 0


def test_the_preparations_run_at_once_have_their_texts_tokenized_in_one_call() -> None:
    """Every text of the preparations run at once goes to one tokenizer call, made before the
    first runs and ended after the last; preparations without texts call nothing."""
    ran: list[str] = []
    calls: list[list[str]] = []

    @contextmanager
    def tokenizing(texts: list[str]) -> Iterator[None]:
        calls.append(texts)
        ran.append("tokenized")
        yield
        ran.append("done")

    run_all(
        [noted("a", ran, ("one", "two")), noted("b", ran), noted("c", ran, ("three",))],
        tokenizing,
    )
    assert calls == [["one", "two", "three"]]
    assert ran == ["tokenized", "a", "b", "c", "done"]
    run_all([noted("d", ran)], tokenizing)
    assert calls == [["one", "two", "three"]] and ran[-1] == "d"
