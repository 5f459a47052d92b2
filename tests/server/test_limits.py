"""Request limits that hold however a request is framed, and server flags refused before listening."""
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
