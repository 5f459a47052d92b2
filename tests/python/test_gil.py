"""Long calls run without the GIL: a Python thread keeps running while one engine step, or one
policy selection, runs. Held, the thread would stand still for the whole call."""
import threading
import time

import numpy as np

import kvdice


def longest_pause_during(call):
    ticks, stop = [], threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    thread = threading.Thread(target=ticker)
    thread.start()
    time.sleep(0.02)
    start = time.monotonic()
    call()
    end = time.monotonic()
    stop.set()
    thread.join()
    inside = [start] + [t for t in ticks if start < t < end] + [end]
    return max(b - a for a, b in zip(inside, inside[1:])), end - start


def test_an_engine_step_releases_the_gil(llm):
    # One prefill step of a 2000-token prompt (the CPU reference's attention makes it long).
    prompt = np.random.default_rng(0).integers(0, llm.info["vocab"] - 30, 2000).tolist()
    pause, duration = longest_pause_during(lambda: llm.generate([prompt], max_new_tokens=1))
    assert duration > 0.2 and pause < duration / 2, (pause, duration)


def test_a_policy_selection_releases_the_gil():
    positions = np.arange(5_000_000, dtype=np.int32)
    pause, duration = longest_pause_during(lambda: kvdice.policy_keep("random_pp", positions, 2_000_000))
    assert duration > 0.1 and pause < duration / 2, (pause, duration)
