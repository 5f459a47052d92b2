"""Many connections at once: every one is answered (200, or 429 with Retry-After beyond --max-queue),
never reset or left without an answer, and the server serves them with threads started on demand."""
from storm import storm

CLIENTS = 256


def test_storm_all_answered(start_server):
    # Queue room for every client: all 256 streams complete, none is refused.
    s = start_server("--policy", "full", "--max-batch", "16", "--max-queue", str(CLIENTS), "--max-tokens", "8")
    counts, _ = storm(s.base, CLIENTS, s.name)
    assert counts == {"200": CLIENTS}, counts
    _, metrics = s.get("/metrics")
    assert 'status="5' not in metrics


def test_storm_beyond_queue_gets_429(start_server):
    # A small queue: the excess is refused with 429 and Retry-After, nothing is reset, and a bounded
    # pool of HTTP threads makes the rest wait in the listen backlog rather than fail.
    s = start_server("--policy", "full", "--max-batch", "4", "--max-queue", "8", "--http-threads", "64",
                     "--max-tokens", "8")
    counts, retry = storm(s.base, CLIENTS, s.name)
    assert set(counts) <= {"200", "429"}, counts
    assert counts["200"] >= 4 + 8, counts
    assert all(r is not None and int(r) >= 1 for r in retry), retry


def test_large_queue_starts_no_thread_per_slot(start_server):
    # --max-queue sizes a queue, not a thread pool: 100000 must start and answer.
    s = start_server("--policy", "full", "--max-queue", "100000", "--max-tokens", "4")
    status, _, _ = s.post("/v1/completions", {"model": s.name, "prompt": "hi", "max_tokens": 4})
    assert status == 200
