"""A model load waits for the tracker's background warm-up imports before importing the same packages
(scikit-learn imports itself in a cycle: two threads importing it at once can leave one with a partially
initialised module, which killed episodes at grading on a loaded machine)."""

from __future__ import annotations

import threading
import time

from mlsandbox.backends.common import mlflow_tracking as T


def test_a_load_waits_for_the_warm_up_thread(monkeypatch) -> None:
    done = threading.Event()

    def slow() -> None:
        time.sleep(0.5)
        done.set()

    thread = threading.Thread(target=slow, daemon=True)
    monkeypatch.setattr(T, "_WARM_THREADS", [thread])
    thread.start()
    T._wait_warm()
    assert done.is_set() and not thread.is_alive()
