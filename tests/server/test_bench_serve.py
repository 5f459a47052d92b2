"""`kvdice bench serve` end to end on the tiny fixture: the server started in process and a separately
started `kvdice serve` given by --url; the record's fields and validation, Poisson arrivals, the time
to first token under a queue, errors counted by kind, and bad flags refused before any work."""
import json
import socket
import statistics
import subprocess

import pytest

from conftest import BINARY, FIXTURE, RunningServer


def bench(tmp_path, *flags, timeout=120):
    out = tmp_path / "serve.json"
    proc = subprocess.run(
        [BINARY, "bench", "serve", *flags, "--json-out", str(out)],
        capture_output=True, text=True, timeout=timeout,
    )
    run = json.loads(out.read_text())["runs"][-1] if out.exists() else None
    return proc, run


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def linear_percentile(values, q):
    v = sorted(values)
    rank = q / 100 * (len(v) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (rank - lo) * (v[hi] - v[lo])


def test_in_process_run_records_every_metric_and_validates(tmp_path):
    proc, run = bench(tmp_path, "--model", FIXTURE, "--backend", "cpu", "--threads", "1",
                      "--num-requests", "6", "--input-len", "12", "--output-len", "24", "--save-detailed")
    assert proc.returncode == 0, proc.stderr
    assert run["protocol"] == "serve"
    for key in ("command", "date", "git_commit", "device", "model", "model_shape", "parameters", "results",
                "validation", "prompts"):
        assert key in run, key
    assert "--num-requests 6" in run["command"]
    p = run["parameters"]
    assert (p["num_requests"], p["input_len"], p["output_len"], p["request_rate"]) == (6, 12, 24, "inf")
    assert p["ignore_eos"] and p["stream"] and p["server"]["kind"] == "kvdice serve in this process"
    m = run["results"][0]["metrics"]
    assert m["completed"] == 6 and m["failed"] == 0 and m["errors"] == {}
    assert m["total_output_tokens"] == 6 * 24
    assert m["total_input_tokens"] == 6 * 12
    assert m["request_throughput"] == pytest.approx(6 / m["duration_s"])
    assert m["output_tok_s"] == pytest.approx(144 / m["duration_s"])
    assert m["total_tok_s"] == pytest.approx((144 + 72) / m["duration_s"])
    for name in ("ttft", "tpot", "itl", "e2el"):
        s = m[name]
        assert 0 < s["p50_ms"] <= s["p90_ms"] <= s["p99_ms"] <= s["max_ms"], name
    assert m["ttft"]["count"] == 6 and m["e2el"]["count"] == 6
    v = run["validation"]
    assert v["ok"] and v["problems"] == []
    rv = run["results"][0]["validation"]
    assert rv["exact_output_lengths"] and rv["tokens_counted_from"] == "usage.completion_tokens"
    # Per request: the definitions hold (TPOT from TTFT and E2E; ITL gaps fill the time after TTFT).
    for r in run["requests"]:
        assert r["ok"] and r["output_tokens"] == 24
        assert 0 < r["ttft_ms"] <= r["e2e_ms"]
        assert r["ttft_ms"] + sum(r["itl_ms"]) <= r["e2e_ms"] + 1e-6
        assert len(r["itl_ms"]) == r["text_chunks"] - 1
    tpots = sorted((r["e2e_ms"] - r["ttft_ms"]) / 23 for r in run["requests"])
    assert m["tpot"]["mean_ms"] == pytest.approx(sum(tpots) / 6)
    # Percentiles interpolate linearly between ranks (numpy's default, vLLM's report).
    for name, key in (("ttft", "ttft_ms"), ("e2el", "e2e_ms")):
        values = [r[key] for r in run["requests"]]
        for q in (50, 90, 99):
            assert m[name][f"p{q}_ms"] == pytest.approx(linear_percentile(values, q)), (name, q)
    itl = [g for r in run["requests"] for g in r["itl_ms"]]
    assert m["itl"]["count"] == len(itl) and m["itl"]["p90_ms"] == pytest.approx(linear_percentile(itl, 90))


def test_poisson_arrivals_keep_the_rate_and_exponential_gaps(tmp_path):
    proc, run = bench(tmp_path, "--model", FIXTURE, "--backend", "cpu", "--threads", "1",
                      "--num-requests", "60", "--request-rate", "100", "--input-len", "4", "--output-len", "2",
                      "--save-detailed")
    assert proc.returncode == 0, proc.stderr
    a = run["results"][0]["metrics"]["arrivals"]
    assert a["sent"] == 60
    assert 50 <= a["offered_rate"] <= 200
    sched = sorted(r["scheduled_s"] for r in run["requests"])
    gaps = [b - c for b, c in zip(sched[1:], sched)]
    assert sched[0] == 0.0 and min(gaps) >= 0
    # Exponential gaps: the coefficient of variation is 1 (evenly spaced arrivals give 0).
    cv = statistics.pstdev(gaps) / statistics.mean(gaps)
    assert 0.6 < cv < 1.5, cv
    # Open loop: each request leaves at its time, whatever is still running.
    for r in run["requests"]:
        assert r["sent_s"] >= r["scheduled_s"] - 1e-3
    assert a["max_send_lag_s"] < 0.5
    assert run["results"][0]["metrics"]["duration_s"] >= a["scheduled_span_s"]


def test_url_against_a_separate_server_measures_ttft_behind_the_queue(tmp_path):
    # One sequence at a time: the k-th request waits for the k-1 before it, so the last first token
    # comes late in the run. (The server's first event carries no text and leaves before the first
    # token; a TTFT taken from it would stay near the server's 50 ms poll.)
    srv = RunningServer("--max-batch", "1", "--api-key", "k1")
    try:
        proc, run = bench(tmp_path, "--url", srv.base, "--api-key", "k1", "--num-requests", "8",
                          "--input-len", "8", "--output-len", "400", "--prompt-vocab", "700", "--save-detailed")
    finally:
        srv.stop()
    assert proc.returncode == 0, proc.stderr
    assert run["model"] == srv.name  # from GET /v1/models
    assert run["parameters"]["server"]["kind"] == "external (--url)"
    m = run["results"][0]["metrics"]
    assert m["completed"] == 8 and m["total_output_tokens"] == 8 * 400
    ttfts = sorted(r["ttft_ms"] for r in run["requests"])
    assert ttfts[-1] >= 0.5 * m["duration_s"] * 1e3, (ttfts, m["duration_s"])
    assert m["ttft"]["max_ms"] == pytest.approx(ttfts[-1])


def test_closed_port_counts_connect_refused_and_fails_clearly(tmp_path):
    port = closed_port()
    proc, run = bench(tmp_path, "--url", f"http://127.0.0.1:{port}", "--num-requests", "5",
                      "--input-len", "8", "--output-len", "4")
    assert proc.returncode != 0
    assert "5 of 5 requests failed with connect_refused" in proc.stderr
    assert f"127.0.0.1:{port}" in proc.stderr
    m = run["results"][0]["metrics"]
    assert m["errors"] == {"connect_refused": 5} and m["completed"] == 0
    assert run["validation"]["ok"] is False


def test_full_queue_429s_are_counted_by_code(tmp_path):
    srv = RunningServer("--max-batch", "1", "--max-queue", "1")
    try:
        proc, run = bench(tmp_path, "--url", srv.base, "--num-requests", "8", "--input-len", "8",
                          "--output-len", "200", "--prompt-vocab", "700", "--warmup-tokens", "0")
    finally:
        srv.stop()
    assert proc.returncode != 0
    m = run["results"][0]["metrics"]
    assert m["errors"].keys() == {"http_429"}, m["errors"]
    assert m["errors"]["http_429"] >= 1 and m["completed"] >= 1  # one queue place: 429s beyond it
    assert m["completed"] + m["errors"]["http_429"] == 8
    assert m["total_output_tokens"] == 200 * m["completed"]
    assert "failed with http_429" in proc.stderr


def test_a_body_over_the_servers_limit_is_counted_as_its_413_not_a_reset(tmp_path):
    # The server answers 413 as soon as the declared length passes --max-body-bytes and closes; the
    # request (~14 MB) is still being written, so the send fails, and the answer is read after it.
    srv = RunningServer("--max-body-bytes", "4096")
    try:
        proc, run = bench(tmp_path, "--url", srv.base, "--num-requests", "2", "--input-len", "2000000",
                          "--output-len", "2", "--prompt-vocab", "700", "--warmup-tokens", "0", "--timeout", "30")
    finally:
        srv.stop()
    assert proc.returncode != 0
    m = run["results"][0]["metrics"]
    assert m["errors"] == {"http_413": 2}, m["errors"]
    assert "failed with http_413" in proc.stderr and "body too large" in proc.stderr


@pytest.mark.parametrize("flags, message", [
    (["--request-rate", "0"], "--request-rate"),
    (["--request-rate", "fast"], "--request-rate"),
    (["--num-requests", "0"], "--num-requests"),
    (["--max-concurrency", "-1"], "--max-concurrency"),
    (["--range-ratio", "1.5"], "--range-ratio"),
    (["--timeout", "nan"], "--timeout"),
    (["--max-duration", "0"], "--max-duration"),
    (["--input-len", "0"], "--prompt-len"),  # the alias's first name
    (["--url", "https://127.0.0.1:1"], "https"),
    (["--url", "http://127.0.0.1:70000"], "port"),
    (["--url", "http://127.0.0.1:1", "--policy", "full"], "--policy"),
    (["--url", "http://127.0.0.1:1", "--requests", "4"], "--requests"),
    (["--random-weights", "--config", "configs/shapes/qwen3-4b.json"], "tokenizer"),
    ([], "--model"),
])
def test_bad_flags_are_refused_before_any_work(tmp_path, flags, message):
    proc, run = bench(tmp_path, *flags, timeout=30)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert run is None


def test_serve_flags_are_refused_by_the_other_protocols(tmp_path):
    proc = subprocess.run([BINARY, "bench", "throughput", "--model", FIXTURE, "--request-rate", "4"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "--request-rate is a flag of bench serve" in proc.stderr


def test_timeouts_are_counted(tmp_path):
    srv = RunningServer("--max-batch", "1")
    try:
        proc, run = bench(tmp_path, "--url", srv.base, "--num-requests", "4", "--input-len", "8",
                          "--output-len", "1000", "--prompt-vocab", "700", "--timeout", "0.05",
                          "--warmup-tokens", "0")
    finally:
        srv.stop()
    assert proc.returncode != 0
    m = run["results"][0]["metrics"]
    assert m["errors"].get("timeout", 0) >= 3, m["errors"]
    assert "failed with timeout" in proc.stderr


def test_max_duration_stops_the_load_and_keeps_what_finished(tmp_path):
    # 20 Poisson arrivals at 4/s span about 5 s; the load stops at 1.5 s: what was scheduled later is
    # never sent, what finished is in the record, and the run is written but not valid.
    proc, run = bench(tmp_path, "--model", FIXTURE, "--backend", "cpu", "--threads", "1",
                      "--num-requests", "20", "--request-rate", "4", "--input-len", "8", "--output-len", "8",
                      "--max-duration", "1.5", "--warmup-tokens", "0", "--save-detailed", timeout=60)
    assert proc.returncode != 0
    assert run is not None and run["parameters"]["max_duration_s"] == 1.5
    m = run["results"][0]["metrics"]
    not_sent, cut = m["errors"].get("not_sent", 0), m["errors"].get("max_duration", 0)
    assert m["completed"] >= 1 and not_sent >= 5, m
    assert m["completed"] + not_sent + cut == 20 and set(m["errors"]) <= {"not_sent", "max_duration"}, m["errors"]
    assert m["arrivals"]["sent"] == 20 - not_sent
    assert m["duration_s"] < 1.5 + 2.0
    scheduled = sorted(r["scheduled_s"] for r in run["requests"] if r["error"] == "not_sent")
    assert scheduled[0] >= 1.5 - 0.3  # only a request at the very edge may miss its turn
    problems = run["results"][0]["validation"]["problems"]
    assert "the load stopped at its --max-duration of 1.5 s" in problems, problems
    assert "--max-duration" in proc.stderr


def test_max_duration_cuts_the_running_request_and_sends_no_queued_one(tmp_path):
    # One client thread, all 20 released at once: the request streaming at 0.6 s is cut there, the ones
    # still queued are never sent (none fails with a connect timeout or another kind).
    proc, run = bench(tmp_path, "--model", FIXTURE, "--backend", "cpu", "--threads", "1",
                      "--num-requests", "20", "--max-concurrency", "1", "--input-len", "8", "--output-len", "2000",
                      "--max-duration", "0.6", "--warmup-tokens", "0", timeout=60)
    assert proc.returncode != 0
    errors = run["results"][0]["metrics"]["errors"]
    assert set(errors) == {"not_sent", "max_duration"} and errors["max_duration"] == 1, errors
    assert "failed with max_duration (e.g. no byte when the load's --max-duration of 0.6 s ended)" in proc.stderr


def test_a_server_killed_mid_stream_gives_truncated_streams(tmp_path):
    import signal
    import time
    srv = RunningServer("--max-batch", "1")
    out = tmp_path / "serve.json"
    client = subprocess.Popen(
        [BINARY, "bench", "serve", "--url", srv.base, "--num-requests", "6", "--input-len", "8",
         "--output-len", "1900", "--prompt-vocab", "700", "--warmup-tokens", "0", "--json-out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Kill the server once the first stream is under way (its generated-token counter moves).
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            if srv.metric("kvdice_generated_tokens_total") > 50:
                break
        except Exception:
            pass
        time.sleep(0.01)
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait()
    _, err = client.communicate(timeout=60)
    assert client.returncode != 0
    m = json.loads(out.read_text())["runs"][-1]["results"][0]["metrics"]
    assert m["errors"].get("truncated_stream", 0) >= 1, m["errors"]
    assert sum(m["errors"].values()) + m["completed"] == 6
    assert "truncated_stream" in err
