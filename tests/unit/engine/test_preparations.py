"""Small requests' preparations waiting for a runner (engine/preparations.py): taken higher
lanes first, all of them or (for the express runner) those of the default lane and above only,
their inputs counted by lane as they wait."""

from __future__ import annotations

from poolserve.engine.preparations import Preparation, Preparations


def noted(name: str, ran: list[str]) -> Preparation:
    return (ran.append, (name,), lambda: None)


def test_the_express_runner_takes_the_default_lane_and_above_and_leaves_the_rest() -> None:
    waiting, ran = Preparations(), []
    for priority, inputs, name in [(5, 3, "bulk"), (0, 1, "query"), (-2, 2, "urgent")]:
        waiting.add(priority, inputs, noted(name, ran))
    waiting.add(0, 1, noted("second query", ran))
    assert waiting.has_foreground()
    for fn, args, _ in waiting.take(foreground_only=True):
        fn(*args)
    assert ran == ["urgent", "query", "second query"]
    assert dict(waiting.inputs) == {5: 3} and waiting.total_inputs == 3
    assert not waiting.has_foreground() and waiting
    assert waiting.take(foreground_only=True) == []
    for fn, args, _ in waiting.take():
        fn(*args)
    assert ran[-1] == "bulk" and not waiting and waiting.total_inputs == 0
