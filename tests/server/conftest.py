"""Starts `kvdice serve` on a free loopback port for the tests, and stops it with SIGTERM."""
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("KVDICE_BINARY", str(ROOT / "build" / "kvdice"))
FIXTURE = str(ROOT / "tests" / "fixtures" / "qwen3")
MODEL = "tiny-qwen3"


class RunningServer:
    def __init__(self, *flags, model=FIXTURE, name=MODEL):
        self.name = name
        self.proc = subprocess.Popen(
            [BINARY, "serve", "--model", model, "--served-model-name", name, "--port", "0", "--threads", "1", *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read()}")
        self.start_line = line
        self.base = line.split("listening on ")[1].split()[0]
        self.port = int(self.base.rsplit(":", 1)[1])

    def url(self, path):
        return self.base + path

    def get(self, path, headers=None):
        req = urllib.request.Request(self.url(path), headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path, body, headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url(path), data=data, headers={"Content-Type": "application/json", **(headers or {})}
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, dict(r.headers), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read().decode()

    def metric(self, name, headers=None):
        """Value of one Prometheus sample, e.g. 'kvdice_running_sequences'."""
        return self.metrics(name, headers=headers)[0]

    def metrics(self, *names, headers=None):
        """Values of several Prometheus samples from one read of /metrics (one moment of the server)."""
        _, text = self.get("/metrics", headers)
        values = []
        for name in names:
            for line in text.splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{") and line.split(" ")[0] == name:
                    values.append(float(line.rsplit(" ", 1)[1]))
                    break
            else:
                raise KeyError(name)
        return values

    def wait_metric(self, name, predicate, timeout=10.0, headers=None):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.metric(name, headers)
            if predicate(value):
                return value
            time.sleep(0.02)
        raise AssertionError(f"{name} = {self.metric(name, headers)} after {timeout} s")

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return code


@pytest.fixture
def start_server():
    servers = []

    def start(*flags, **kw):
        s = RunningServer(*flags, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        assert s.stop() == 0, s.proc.stderr.read()


@pytest.fixture(scope="module")
def server():
    """A shared server: default policy random_pp with T=32, r=8."""
    s = RunningServer("--budget", "32", "--window", "8", "--max-tokens", "64")
    yield s
    assert s.stop() == 0
