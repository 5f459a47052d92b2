"""Request limits that hold however a request is framed, and server flags refused before listening."""
import json
import socket
import subprocess

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
                                        ("--host", "256.1.1.1"), ("--http-threads", "0"), ("--max-queue", "0")])
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


def test_policy_table_is_bounded_with_a_clear_400(start_server):
    """The engine holds at most 64 distinct policies (name and options; the server's default is one):
    the 65th gets 400 too_many_policies naming kv.policy, and policies already held still serve."""
    s = start_server("--policy", "full")
    spec = lambda k: "random_pp_rec:recent=%g" % (k / 100)
    for k in range(1, 64):
        status, body = _completion(s, {"policy": spec(k), "budget": 32, "window": 8})
        assert status == 200 and "choices" in body, (k, status, body)
    # A budget does not make a policy distinct: still one of the 64.
    status, body = _completion(s, {"policy": spec(5), "budget": 64, "window": 8})
    assert status == 200 and "choices" in body, body
    status, body = _completion(s, {"policy": spec(64), "budget": 32, "window": 8})
    assert status == 400, body
    assert body["error"]["code"] == "too_many_policies" and body["error"]["param"] == "kv.policy", body
    assert "at most 64" in body["error"]["message"], body
    for kv in ({"policy": spec(1), "budget": 32, "window": 8}, {"policy": "full"}):
        status, body = _completion(s, kv)
        assert status == 200 and "choices" in body, (kv, body)
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
