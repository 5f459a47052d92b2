"""A bounded load test (fixed clients, fixed time, loopback only) and a schema fuzz with schemathesis
against the server's own /openapi.json: every response complete and well-formed, zero 5xx."""
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time

import openai

from conftest import MODEL

CLIENTS = 8
SECONDS = 8.0


# Requests keep arriving while others decode, each with its own policy: the scoring ones record their
# signals (query ring, attention mass, value ranges) in steps that mix one request's prefill with the
# others' decode rows.
SCORING = ["snapkv_pp", "h2o_pp", "vase_pp", "rkv_official"]


def test_load(start_server):
    s = start_server("--budget", "32", "--window", "8", "--max-batch", "16", "--max-queue", "32",
                     "--signals-for", *SCORING)
    c = openai.OpenAI(base_url=s.url("/v1"), api_key="none", max_retries=0)
    kvs = [{"policy": "random_pp", "budget": 32, "window": 8}, {"policy": "full"}] + [{"policy": p} for p in SCORING]
    deadline = time.time() + SECONDS

    evicted = set()  # the policies seen evicting in a request that ran past T + r

    def worker(k):
        done, tokens, i = 0, 0, 0
        while time.time() < deadline:
            i += 1
            kv = kvs[(k + i) % len(kvs)]
            max_tokens = 16 + (k * 7 + i * 5) % 48
            extra = {"kv": kv}
            if i % 2:
                r = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"req {k} {i}"}],
                                              max_tokens=max_tokens, seed=i, extra_body=extra)
                assert r.choices[0].finish_reason in ("stop", "length")
                assert isinstance(r.choices[0].message.content, str)
                n = r.usage.completion_tokens
                used = r.usage.model_extra["kv"]
                assert used["policy"] == kv["policy"]
                # Past T + r = 40 slots (with a margin of r) every policy but full has evicted.
                if kv["policy"] != "full" and r.usage.prompt_tokens + n >= 48:
                    assert used["eviction_rounds"] >= 1, (kv, r.usage)
                    evicted.add(kv["policy"])
            else:
                chunks = list(c.completions.create(model=MODEL, prompt=f"load {k} {i}", max_tokens=max_tokens,
                                                   seed=i, stream=True, stream_options={"include_usage": True},
                                                   extra_body=extra))
                finals = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
                assert len(finals) == 1 and finals[0].choices[0].finish_reason in ("stop", "length")
                n = chunks[-1].usage.completion_tokens
            assert 1 <= n <= max_tokens
            done += 1
            tokens += n
        return done, tokens

    start = time.time()
    with cf.ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(worker, range(CLIENTS)))
    wall = time.time() - start
    requests = sum(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    assert requests >= CLIENTS
    assert evicted >= set(SCORING), evicted
    assert s.metric("kvdice_running_sequences") == 0 and s.metric('kvdice_kv_slots{state="reserved"}') == 0
    _, metrics = s.get("/metrics")
    assert 'status="5' not in metrics
    report = {"clients": CLIENTS, "seconds": round(wall, 2), "requests": requests, "requests_per_s": round(requests / wall, 2),
              "completion_tokens": tokens, "tokens_per_s": round(tokens / wall, 1)}
    print("\nload:", json.dumps(report))
    out = os.environ.get("KVDICE_LOAD_REPORT")
    if out:
        with open(out, "w") as f:
            json.dump(report, f)


def test_schema_fuzz(start_server):
    s = start_server("--budget", "32", "--window", "8", "--max-tokens", "16", "--max-n", "4",
                     "--max-queue", "64", "--max-body-bytes", "65536")
    cmd = [sys.executable, "-m", "schemathesis.cli", "run", s.url("/openapi.json"),
           "--checks", "not_a_server_error", "--max-examples", os.environ.get("KVDICE_FUZZ_EXAMPLES", "60"),
           "--mode", "all", "--generation-deterministic", "--request-timeout", "60", "--no-color"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    _, metrics = s.get("/metrics")
    assert 'status="5' not in metrics, metrics
    assert s.proc.poll() is None, "the server died under the fuzz"
