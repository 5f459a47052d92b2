"""A connection storm: many clients connect at the same instant and each sends one streaming
completion over a raw socket, so that a reset, an empty answer or a 5xx is seen as such (an HTTP
library would retry or hide it). Used by test_concurrency.py and runnable by hand:
    python3 tests/server/storm.py http://127.0.0.1:8000 1024 tiny-qwen3
"""
import collections
import json
import socket
import sys
import threading


def _one(host, port, body, barrier, results, i, timeout):
    outcome = "unknown"
    retry_after = None
    try:
        barrier.wait(timeout=60)
        with socket.create_connection((host, port), timeout=timeout) as sock:
            request = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
            sock.sendall(request)
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        if not data:
            outcome = "empty"
        else:
            head = data.split(b"\r\n", 1)[0].decode(errors="replace")
            status = int(head.split()[1])
            outcome = str(status)
            if status == 429:
                for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
                    k, _, v = line.decode().partition(":")
                    if k.lower() == "retry-after":
                        retry_after = v.strip()
            elif status == 200 and b"data: [DONE]" not in data:
                outcome = "truncated"
    except ConnectionResetError:
        outcome = "reset"
    except (BrokenPipeError, ConnectionRefusedError, ConnectionAbortedError) as e:
        outcome = type(e).__name__
    except (socket.timeout, TimeoutError):
        outcome = "timeout"
    except Exception as e:  # noqa: BLE001 - every failure is counted, none may pass silently
        outcome = f"error:{type(e).__name__}"
    results[i] = (outcome, retry_after)


def storm(base_url, clients, model, max_tokens=8, timeout=30):
    """Returns a Counter of outcomes ('200', '429', 'reset', 'empty', ...) and the 429s' Retry-After values."""
    host, port = base_url.split("//", 1)[1].rsplit(":", 1)
    body = json.dumps({"model": model, "prompt": "storm", "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True}).encode()
    barrier = threading.Barrier(clients)
    results = [None] * clients
    threads = [threading.Thread(target=_one, args=(host, int(port), body, barrier, results, i, timeout))
               for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = collections.Counter(r[0] for r in results)
    retry = [r[1] for r in results if r[0] == "429"]
    return counts, retry


if __name__ == "__main__":
    counts, retry = storm(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "tiny-qwen3")
    print(json.dumps({"outcomes": counts, "429_without_retry_after": sum(r is None for r in retry)}))
