"""Each runner keeps its own intra-op thread count: torch's count is per thread (OpenMP's own
setting), and `use_threads` makes sure a thread's first parallel operator does not reset it to
the last value another thread set."""

from __future__ import annotations

import threading

import torch

from poolserve.backends.torch_model.executor import use_threads


def test_two_threads_keep_their_own_torch_thread_counts() -> None:
    counts: dict[int, int] = {}
    both_set, both_ran = threading.Barrier(2, timeout=10), threading.Barrier(2, timeout=10)

    def runner(threads: int) -> None:
        use_threads(threads)
        both_set.wait()  # the other thread has set its own count since
        matrix = torch.randn(128, 128)
        (matrix @ matrix).sum()  # a parallel operator
        both_ran.wait()
        counts[threads] = torch.get_num_threads()

    workers = [threading.Thread(target=runner, args=(n,)) for n in (1, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    assert counts == {1: 1, 2: 2}
