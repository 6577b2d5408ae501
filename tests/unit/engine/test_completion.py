"""A request's light future (engine/completion.py): settled once, read as a Future is."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError

import pytest

from poolserve.engine.completion import Completion

WAIT = 10.0


def test_settled_once_the_first_outcome_stays() -> None:
    done: Completion[int] = Completion()
    assert not done.done()
    assert done.set_result(1)
    assert not done.set_result(2)
    assert not done.set_exception(ValueError("late"))
    assert not done.cancel()  # settled: nothing to cancel
    assert done.done() and not done.cancelled()
    assert done.result() == 1 and done.exception() is None


def test_a_cancel_wins_over_a_late_result() -> None:
    done: Completion[int] = Completion()
    assert done.cancel()
    assert done.cancel()  # still cancelled
    assert not done.set_result(1)
    assert done.cancelled()
    with pytest.raises(CancelledError):
        done.result()
    with pytest.raises(CancelledError):
        done.exception()


def test_an_exception_is_raised_by_result() -> None:
    done: Completion[int] = Completion()
    error = ValueError("bad input")
    done.set_exception(error)
    assert done.exception() is error
    with pytest.raises(ValueError, match="bad input"):
        done.result()


def test_callbacks_run_once_settled_or_at_once_when_added_after() -> None:
    done: Completion[str] = Completion()
    seen: list[str] = []
    done.add_done_callback(lambda outcome: seen.append(f"before {outcome.result()}"))

    def failing(outcome: Completion[str]) -> None:
        raise RuntimeError("a broken callback")

    done.add_done_callback(failing)  # logged; the others still run
    done.add_done_callback(lambda outcome: seen.append("after the broken one"))
    assert seen == []
    done.set_result("x")
    done.add_done_callback(lambda outcome: seen.append("added later"))
    assert seen == ["before x", "after the broken one", "added later"]


def test_a_thread_blocks_until_it_is_settled_and_times_out_otherwise() -> None:
    done: Completion[int] = Completion()
    with pytest.raises(TimeoutError):
        done.result(timeout=0)
    waiting = threading.Event()
    got: list[int] = []

    def wait() -> None:
        waiting.set()
        got.append(done.result(WAIT))

    thread = threading.Thread(target=wait)
    thread.start()
    assert waiting.wait(WAIT)
    done.set_result(7)
    thread.join(WAIT)
    assert got == [7]
