"""Request limits that hold however a request is framed, and server flags refused before listening."""
import json
import socket
import subprocess
import time

import pytest

from conftest import BINARY, FIXTURE


def test_non_json_content_type_gets_415(start_server):
    s = start_server("--policy", "full")
    body = b'{"model": "tiny-qwen3", "prompt": "hi", "max_tokens": 2}'
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, _, text = s.post("/v1/completions", body, headers={"Content-Type": content_type})
        assert status == 415, (content_type, status, text)
    status, _, _ = s.post("/v1/completions", body, headers={"Content-Type": "application/json; charset=utf-8"})
    assert status == 200


def test_chunked_body_beyond_limit_gets_413(start_server):
    s = start_server("--policy", "full", "--max-body-bytes", "4096")
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"1000\r\n" + b" " * 4096 + b"\r\n"
        sent = 0
        try:
            for _ in range(4096):  # 16 MiB offered; the server must stop reading long before
                sock.sendall(chunk)
                sent += 1
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert s.proc.poll() is None


@pytest.mark.parametrize("flag,value", [("--max-n", "0"), ("--max-body-bytes", "-1"), ("--seed", "-1"),
                                        ("--host", "256.1.1.1"), ("--http-threads", "0"), ("--max-queue", "0"),
                                        ("--signals-for", "no-such-policy"), ("--signals-for", "vase:pool=0")])
def test_bad_server_flag_refused_before_listening(flag, value):
    proc = subprocess.run([BINARY, "serve", "--model", FIXTURE, "--policy", "full", "--port", "0", flag, value],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "listening" not in proc.stdout
    assert flag in proc.stderr or value in proc.stderr, proc.stderr


@pytest.mark.parametrize("temperature", [1e-45, 1e-4, 5.0, -1.0])
def test_temperature_outside_the_sampling_rule_gets_400_and_the_server_lives(start_server, temperature):
    s = start_server("--policy", "full")
    body = ('{"model": "tiny-qwen3", "prompt": "hi", "max_tokens": 2, "temperature": %r}' % temperature).encode()
    status, _, text = s.post("/v1/completions", body, headers={"Content-Type": "application/json"})
    assert status == 400, (temperature, status, text)
    assert "temperature" in text
    status, _, _ = s.post("/v1/completions", b'{"model": "tiny-qwen3", "prompt": "hi", "max_tokens": 2}',
                          headers={"Content-Type": "application/json"})
    assert status == 200 and s.proc.poll() is None


def _completion(s, kv, max_tokens=1):
    body = {"model": "tiny-qwen3", "prompt": "policy table", "max_tokens": max_tokens, "kv": kv}
    status, _, text = s.post("/v1/completions", body)
    return status, json.loads(text)


def _spec(k):
    """A distinct policy per k < 100000 (random_pp_rec's recent share)."""
    return "random_pp_rec:recent=%g" % (k / 100000)


def test_policy_table_reuses_places_no_request_holds(start_server):
    """The engine holds 64 distinct policies at once (name and options; the server's default is one): a
    place no waiting or running request holds goes to the next new policy, so 130 distinct policies one
    after another all serve, as does one seen long ago and a budget that differs only in its budget."""
    s = start_server("--policy", "full")
    for k in range(1, 131):
        status, body = _completion(s, {"policy": _spec(k), "budget": 32, "window": 8})
        assert status == 200 and "choices" in body, (k, status, body)
    for kv in ({"policy": _spec(1), "budget": 64, "window": 8}, {"policy": _spec(130), "budget": 32, "window": 8},
               {"policy": "full"}):
        status, body = _completion(s, kv)
        assert status == 200 and "choices" in body, (kv, body)
    assert s.proc.poll() is None


def _open_stream(s, kv, max_tokens):
    body = json.dumps({"model": "tiny-qwen3", "prompt": "policy table", "max_tokens": max_tokens,
                       "ignore_eos": True, "stream": True, "kv": kv}).encode()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body[:-1])
    return sock, body[-1:]  # the last byte, sent when every request is open


def test_policy_table_full_of_live_requests_gets_a_clear_400(start_server):
    """With 63 distinct policies held by live requests (one running, the rest queued behind a batch of
    one) besides the default, a 65th distinct policy gets 400 too_many_policies naming kv.policy; once
    they are gone, the same policy serves. The tiny model runs a request in ~0.2 s, so the running one
    may end between the count of held places (kvdice_kv_policies_held) and the probe: then the probe
    rightly gets 200 and the round is run again with the next 63 policies (a server that never refuses
    fails every round)."""
    s = start_server("--policy", "full", "--max-batch", "1", "--max-queue", "64")
    refused = None
    for attempt in range(5):
        base = 1000 * (attempt + 1)  # fresh policies each round
        opened = [_open_stream(s, {"policy": _spec(base + k), "budget": 32, "window": 8}, 2000) for k in range(63)]
        socks = [sock for sock, _ in opened]
        try:
            for sock, last in opened:  # all 63 arrive at once, while the first one runs
                sock.sendall(last)
            deadline = time.time() + 3
            while time.time() < deadline and s.metric("kvdice_kv_policies_held") < 64:
                time.sleep(0.002)
            if s.metric("kvdice_kv_policies_held") == 64:
                status, body = _completion(s, {"policy": _spec(base + 999), "budget": 32, "window": 8})
                if status != 200:
                    refused = (status, body)
        finally:
            for sock in socks:
                sock.close()
        s.wait_metric("kvdice_kv_policies_held", lambda v: v == 1, timeout=30)
        if refused:
            break
    assert refused is not None, "a 65th distinct policy was served while 64 were held"
    status, body = refused
    assert status == 400, body
    assert body["error"]["code"] == "too_many_policies" and body["error"]["param"] == "kv.policy", body
    assert "at most 64" in body["error"]["message"] and _spec(base + 999) in body["error"]["message"], body
    status, body = _completion(s, {"policy": _spec(base + 999), "budget": 32, "window": 8})
    assert status == 200 and "choices" in body, body
    assert s.proc.poll() is None


@pytest.mark.parametrize("policy,says,never", [
    ("vase:pool=0", "option pool=0 outside [1, 99]", "unknown policy"),
    ("vase:pool=x", "option pool='x' is not an integer", "unknown policy"),
    ("vase:poool=4", "unknown option(s) poool", "unknown policy"),
    ("random_pp:block=4", "takes no options", "unknown policy"),
    ("random_block_pp:block", "is not key=value", "unknown policy"),
    ("no_such_policy:block=4", "unknown policy 'no_such_policy'", "option"),
])
def test_bad_policy_option_is_named_as_such(start_server, policy, says, never):
    s = start_server("--policy", "full")
    status, body = _completion(s, {"policy": policy, "budget": 32, "window": 8})
    assert status == 400, body
    message = body["error"]["message"]
    assert body["error"]["param"] == "kv.policy" and says in message and never not in message, message
    assert "--polic" not in message, message  # the client sent a JSON field, not a command-line flag


def test_a_request_cannot_make_the_server_open_a_file_of_its_choosing(start_server, tmp_path):
    """TriAttention's statistics are a file: a request naming one made the server open any path it gave
    and say in the error whether it existed, what it was and how big it was."""
    stats = tmp_path / "stats.safetensors"
    text = tmp_path / "calibration.txt"
    text.write_text("the cat sat on the mat and the dog ran in the park. " * 40)
    subprocess.run([BINARY, "calibrate", "--model", FIXTURE, "--text", str(text), "--out", str(stats),
                    "--tokens", "256", "--segment", "128"], check=True, capture_output=True, timeout=120)
    secret = tmp_path / "secret.txt"
    secret.write_text("x" * 1234)
    probes = [str(secret), "/dev/zero", str(tmp_path / "missing"), str(tmp_path)]

    s = start_server("--policy", "full")
    for path in probes:
        status, body = _completion(s, {"policy": "triattention:stats=" + path, "budget": 64, "window": 8})
        assert status == 400 and body["error"]["param"] == "kv.policy", body
        message = body["error"]["message"]
        assert "may not name a file on the server" in message, message
        assert path not in message and "1234" not in message and "device" not in message, message

    own = "triattention:stats=" + str(stats)
    s = start_server("--policy", own, "--budget", "64", "--window", "8")
    status, body = _completion(s, {"policy": own, "budget": 64, "window": 8}, max_tokens=2)
    assert status == 200 and "choices" in body, body
    status, body = _completion(s, {"policy": "triattention", "budget": 64, "window": 8})
    assert status == 400 and "send '%s'" % own in body["error"]["message"], body
    status, body = _completion(s, {"policy": "triattention:stats=" + str(secret), "budget": 64, "window": 8})
    assert status == 400 and "1234" not in body["error"]["message"], body
    assert "send '%s'" % own in body["error"]["message"], body


def test_a_policy_that_cannot_run_under_its_budget_is_refused_and_ends_no_other_request(start_server):
    """A pinned span larger than a round keeps failed the shared eviction round: every request in flight
    ended with "engine failure" (and the refused request itself got status 200 with an error body). It
    is refused with 400 before it is accepted now, and the others run on."""
    s = start_server("--policy", "full", "--max-tokens", "64")
    box = {}

    def other():
        body = {"model": "tiny-qwen3", "prompt": "policy table", "max_tokens": 64, "ignore_eos": True,
                "kv": {"policy": "random_pp", "budget": 32, "window": 8}}
        status, _, text = s.post("/v1/completions", body)
        box["other"] = status, json.loads(text)

    import threading
    t = threading.Thread(target=other)
    t.start()
    status, body = _completion(s, {"policy": "random_pin_pp:span=0-1000", "budget": 64, "window": 8},
                               max_tokens=300)
    t.join()
    assert status == 400 and body["error"]["param"] == "kv.budget", body
    assert "span positions but a round keeps" in body["error"]["message"], body
    status, body = box["other"]
    assert status == 200 and body["choices"][0]["finish_reason"] == "length", body
    assert body["usage"]["completion_tokens"] == 64
