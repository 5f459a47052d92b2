"""`kvdice serve --model M` with no kv flags: the documented default budget, the pool on the start-up
line, and /metrics reporting the same capacity."""
import http.client
import json
import re
import subprocess
import time

from conftest import BINARY, FIXTURE, MODEL
import openai


def test_no_kv_flags_serves_under_the_default_budget(start_server):
    s = start_server()
    line = s.start_line
    assert "default kv random_pp T=2048 r=64" in line, line
    m = re.search(r"KV pool (\d+) slots \(([\d.]+) GiB, [^)]*\), max batch (\d+): (\d+) sequences of T \+ r = 2112 "
                  r"fit, (\d+) of the full context (\d+)", line)
    assert m, line
    assert line.rstrip().endswith("; signals recorded: none"), line  # random_pp reads no signal
    slots, batch, fit, fit_full, context = (int(m.group(i)) for i in (1, 3, 4, 5, 6))
    assert slots == 65536 and batch == 64  # the CPU defaults
    assert fit == 65536 // 2112 and fit_full == 65536 // context
    assert s.metric('kvdice_kv_slots{state="capacity"}') == slots
    c = openai.OpenAI(base_url=s.url("/v1"), api_key="none")
    r = c.completions.create(model=MODEL, prompt="hello", max_tokens=4)
    assert r.usage.model_extra["kv"]["reserved_slots"] == 2048 + 64


def test_kv_slots_is_the_exact_capacity(start_server):
    s = start_server("--kv-slots", "5000")
    assert "KV pool 5000 slots" in s.start_line
    assert s.metric('kvdice_kv_slots{state="capacity"}') == 5000


def test_the_server_runs_as_many_sequences_as_bench_capacity_fits_in_the_same_memory(start_server, tmp_path):
    """The equal-memory claim through HTTP: with --kv-memory-gib M the server keeps as many requests
    decoding at once as `kvdice bench capacity --memory-gib M` reports for the same T, r and lengths,
    and queues the rest instead of refusing or preempting them."""
    # One sequence reserves T + r = 40 slots = 3 pages of 16; a page is 2 layers x 2 KV heads x 16 slots
    # x (2 x 32 fp32 + an int32 position) = 16,640 bytes: 10 sequences and a half fit.
    gib = f"{10.5 * 49920 / (1 << 30):.12f}"
    out = tmp_path / "capacity.json"
    r = subprocess.run([BINARY, "bench", "capacity", "--model", FIXTURE, "--backend", "cpu", "--threads", "1",
                        "--memory-gib", gib, "--prompt-len", "16", "--output-len", "60", "--budget", "32",
                        "--window", "8", "--json-out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    fits = json.loads(out.read_text())["runs"][0]["results"][0]["metrics"]["batch"]
    assert fits == 10
    s = start_server("--kv-memory-gib", gib, "--budget", "32", "--window", "8", "--max-tokens", "100000")
    assert f"{fits} sequences of T + r = 40 fit" in s.start_line, s.start_line
    body = {"model": MODEL, "prompt": [5] * 16, "max_tokens": 2000, "ignore_eos": True, "stream": True}
    n = fits + 3
    conns = []
    for _ in range(n):  # streaming requests left open: each holds its reservation until it ends
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        conns.append(c)
    try:
        # Requests arrive one by one and are admitted at step boundaries, so a moment with n - fits
        # queued can still have fewer than `fits` running (the last arrivals not yet admitted): wait for
        # the steady state, read from one snapshot, never above `fits` on the way.
        deadline = time.time() + 30
        running, queued = s.metrics("kvdice_running_sequences", "kvdice_queue_depth")
        while (running, queued) != (fits, n - fits) and time.time() < deadline:
            assert running <= fits, f"{running} sequences running where {fits} fit"
            time.sleep(0.02)
            running, queued = s.metrics("kvdice_running_sequences", "kvdice_queue_depth")
        assert (running, queued) == (fits, n - fits), f"running {running}, queued {queued} after 30 s"
    finally:
        for c in conns:
            c.close()
    s.wait_metric("kvdice_running_sequences", lambda v: v == 0, timeout=30)


def test_a_request_whose_pages_can_never_fit_is_refused_not_queued_forever(start_server):
    """Reservations are whole pages: two choices of 247 slots (16 pages of 16 each) fit 496 slots but
    not 31 pages, so the request is a 400 naming the reservation, not a wait that never ends."""
    gib = f"{10.5 * 49920 / (1 << 30):.12f}"  # 31 pages of 16 slots
    s = start_server("--kv-memory-gib", gib, "--policy", "full")
    assert "KV pool 496 slots" in s.start_line, s.start_line
    prompt = [5] * 16
    status, _, body = s.post("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 231, "n": 2})
    assert status == 400 and "kv_reservation_too_large" in body and "pages of 16" in body, body
    status, _, body = s.post("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 224, "n": 2})
    assert status == 200, body  # 240 slots = 15 pages each: 30 of 31
