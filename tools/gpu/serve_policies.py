#!/usr/bin/env python3
"""Every KV policy through `kvdice serve` with real HTTP clients, as a user runs it (stdlib only, so it
runs on the GPU machine as it is).

    python3 tools/gpu/serve_policies.py --binary .gpu-bin/kvdice --model .gpu/qwen2.5-0.5b --backend cuda \
        --out $OUT/serve-policies.json

One server, started as a user starts it (`--port 0`, a default scoring policy, `--signals-for` the
policies that read other signals), then three rounds:
  1. every policy at once, `--copies` seeded requests each (the first two with the same seed), all in
     flight together: the two twins give the same text (rows of one batch do not see each other);
  2. each policy's first request again, alone, then streamed: the same text both times. Whether it also
     equals the batch's is reported (`batch_divergence`: the first differing character), and is a
     failure only with --batch-invariant (the CPU backend: its kernels sum in a fixed order whatever
     the batch; cuBLASLt picks GEMM plans by the batch's rows).
Each response is checked: 200, `completion_tokens == max_tokens` (ignore_eos), the policy echoed in
usage.kv, eviction rounds for every policy but `full`, peak slots within T + r. Then /health, /metrics
and a SIGTERM drain that exits 0. Exit status 0 only when every check passed; every result goes to --out.
"""
import argparse
import concurrent.futures as cf
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

POLICIES = [
    "full", "random_pp", "random_block_pp", "random_vrange_pp", "snapkv", "snapkv_pp",
    "snapkv_pp:precision=fp32", "vase", "vase_pp", "vase_pp:precision=fp32", "rkv", "rkv_pp",
    "rkv_pp:lambda=0.1,precision=fp32", "rkv_official", "h2o", "h2o_pp",
]
PROMPT = "The lighthouse keeper counted the ships that passed each night and wrote their names in a book."


def post(base, body, timeout):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def stream(base, body, timeout):
    """The streamed text and the final usage of one request (server-sent events)."""
    req = urllib.request.Request(base + "/v1/completions",
                                 data=json.dumps({**body, "stream": True,
                                                  "stream_options": {"include_usage": True}}).encode(),
                                 headers={"Content-Type": "application/json"})
    text, usage = [], None
    try:
        r = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}: {e.read().decode()[:300]}", None
    with r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices", []):
                text.append(choice.get("text", ""))
            usage = event.get("usage") or usage
    return "".join(text), usage


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=int, default=128)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=320)
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--policies", nargs="*", default=POLICIES)
    ap.add_argument("--batch-invariant", action="store_true",
                    help="fail when a request alone decodes other text than in the batch")
    ap.add_argument("--kv-memory-gib", type=float, help="the server's KV pool (default: the server's own rule)")
    args = ap.parse_args()

    cmd = [args.binary, "serve", "--model", args.model, "--backend", args.backend, "--port", "0",
           "--served-model-name", "m", "--policy", "snapkv_pp", "--budget", str(args.budget), "--window", str(args.window),
           "--signals-for", *args.policies]
    if args.kv_memory_gib:
        cmd += ["--kv-memory-gib", str(args.kv_memory_gib)]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    if "listening on" not in line:
        server.kill()
        sys.exit(f"server did not start: {line!r} {server.stderr.read()}")
    base = line.split("listening on ")[1].split()[0]
    failures, report = [], {"command": cmd, "start_line": line.strip(), "rounds": {}}

    def body(policy, seed):
        return {"model": "m", "prompt": PROMPT, "max_tokens": args.max_tokens, "seed": seed, "temperature": 0.7,
                "ignore_eos": True, "kv": {"policy": policy, "budget": args.budget, "window": args.window}}

    def check(tag, policy, status, text):
        if status != 200:
            failures.append(f"{tag} {policy}: HTTP {status}: {text[:300]}")
            return None
        r = json.loads(text)
        usage, kv = r["usage"], r["usage"]["kv"]
        name = policy.split(":")[0]
        problems = []
        if usage["prompt_tokens"] >= args.budget - args.window:
            problems.append(f"the prompt ({usage['prompt_tokens']} tokens) leaves no room under T - r")
        if usage["completion_tokens"] != args.max_tokens:
            problems.append(f"completion_tokens {usage['completion_tokens']}")
        if kv["policy"].split(":")[0] != name:
            problems.append(f"policy echoed as {kv['policy']}")
        if name == "full":
            if kv["eviction_rounds"] != 0:
                problems.append(f"full evicted {kv['eviction_rounds']} times")
        else:
            if kv["eviction_rounds"] <= 0:
                problems.append("no eviction round")
            if kv["peak_slots"] > args.budget + args.window:
                problems.append(f"peak_slots {kv['peak_slots']} > T + r")
        if problems:
            failures.append(f"{tag} {policy}: " + ", ".join(problems))
        return {"text": r["choices"][0]["text"], "kv": kv}

    # Copies 0 and 1 share a seed (twins); copy c >= 2 has its own.
    jobs = [(p, 1000 + i * 10 + max(c - 1, 0)) for i, p in enumerate(args.policies) for c in range(args.copies)]
    started = time.time()
    with cf.ThreadPoolExecutor(len(jobs)) as pool:
        answers = list(pool.map(lambda j: post(base, body(*j), args.timeout), jobs))
    together = {}
    for (policy, seed), (status, text) in zip(jobs, answers):
        got = check("together", policy, status, text)
        if got is None or seed % 10 != 0:
            continue
        if policy in together and got["text"] != together[policy]["text"]:
            failures.append(f"together {policy}: two requests with the same seed in one batch gave different text")
        together.setdefault(policy, got)
    report["rounds"]["together"] = {"requests": len(jobs), "seconds": round(time.time() - started, 2),
                                    "kv": {p: g["kv"] for p, g in together.items()}}

    started = time.time()
    divergence = {}
    for policy in args.policies:
        seed = 1000 + args.policies.index(policy) * 10
        got = check("alone", policy, *post(base, body(policy, seed), args.timeout))
        if got is None:
            continue
        text, usage = stream(base, body(policy, seed), args.timeout)
        if text != got["text"]:
            failures.append(f"stream {policy}: streamed text differs from the same request not streamed")
        if usage is None or usage.get("completion_tokens") != args.max_tokens:
            failures.append(f"stream {policy}: usage {usage}")
        if policy in together and got["text"] != together[policy]["text"]:
            a, b = got["text"], together[policy]["text"]
            divergence[policy] = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            if args.batch_invariant:
                failures.append(f"alone {policy}: text differs from the same seeded request in the batch")
    report["rounds"]["alone_and_streamed"] = {"seconds": round(time.time() - started, 2)}
    report["batch_divergence"] = divergence

    with urllib.request.urlopen(base + "/health", timeout=10) as r:
        if r.status != 200:
            failures.append(f"/health {r.status}")
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        metrics = r.read().decode()
    rounds = [l for l in metrics.splitlines() if l.startswith("kvdice_eviction_rounds_total")]
    report["eviction_rounds_metric"] = rounds
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        code = "killed after 60 s"
    if code != 0:
        failures.append(f"server exit {code}: {server.stderr.read()[-2000:]}")
    report["server_exit"] = code
    report["failures"] = failures
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    for p, g in together.items():
        print(f"{p:40s} rounds {g['kv']['eviction_rounds']:4d} peak {g['kv']['peak_slots']}")
    print(f"{len(jobs)} requests together in {report['rounds']['together']['seconds']} s; "
          f"alone differs from the batch for {len(divergence)} of {len(args.policies)} policies "
          f"(first differing character: {divergence}); {len(failures)} failures")
    for f in failures:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
