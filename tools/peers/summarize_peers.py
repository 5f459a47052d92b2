#!/usr/bin/env python3
"""Collects run-peers.sh's raw outputs in OUT_DIR into summary.json and summary.md.

    python3 summarize_peers.py OUT_DIR [--seconds N]

llama.cpp rows come from llama-batched-bench's JSONL lines in llama_*.log (S_TG = B*TG / T_TG: decode
only); HF rows from hf_*.json (hf_random_pp.py). A piece that failed or was skipped is listed with
its exit status from status.tsv, never silently dropped.
"""
import argparse
import json
import pathlib


def llama_rows(out):
    rows = []
    for log in sorted(out.glob("llama_*.log")):
        for line in log.read_text(errors="replace").splitlines():
            line = line.strip()
            if line.startswith("{") and '"speed_tg"' in line:
                r = json.loads(line)
                b, pp, tg = r["pl"], r["pp"], r["tg"]
                rows.append({
                    "peer": "llama.cpp",
                    "run": log.stem,
                    "config": f"f16 GGUF, f16 KV, flash_attn={r['flash_attn']}, llama-batched-bench",
                    "batch": b,
                    "prompt_len": pp,
                    "gen": tg,
                    "kv_per_seq_end": pp + tg,
                    "decode_tok_s": round(r["speed_tg"], 2),
                    "mean_step_ms": round(r["t_tg"] / tg * 1e3, 3),
                    "prefill_tok_s": round(r["speed_pp"], 2),
                    "raw": r,
                })
    return rows


def hf_rows(out):
    rows = []
    for f in sorted(out.glob("hf_*.json")):
        r = json.loads(f.read_text())
        row = {
            "peer": "HF harness (transformers, sdpa, DynamicCache)",
            "run": f.stem,
            "config": r["policy"] + (f" T={r['budget_T']} r={r['window_r']}" if r["policy"] == "random_pp" else ""),
            "batch": r["batch"],
            "prompt_len": r["prompt_len"],
            "gen": r["gen"],
            "kv_per_seq_end": r["final_cache_len"],
            "decode_tok_s": r["decode_tok_s"],
            "mean_step_ms": r["mean_step_ms"],
            "peak_mem_gb": round(r["peak_mem_bytes"] / 1e9, 2) if r.get("peak_mem_bytes") else None,
            "eviction_rounds": r["eviction_rounds"],
            "evict_round_ms": r["evict_round_ms_mean"],
            "evict_share": r["evict_share_of_decode"],
            "steady_tok_s": (r.get("steady_state") or {}).get("tok_s"),
            "raw": r,
        }
        rows.append(row)
    return rows


def fmt(v, nd=1):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--seconds", type=int)
    args = ap.parse_args()
    out = args.out
    status = []
    if (out / "status.tsv").is_file():
        for line in (out / "status.tsv").read_text().splitlines()[1:]:
            name, rc, secs = line.split("\t")
            status.append({"piece": name, "rc": rc, "seconds": int(secs)})
    rows = llama_rows(out) + hf_rows(out)
    env = (out / "env.txt").read_text() if (out / "env.txt").is_file() else ""
    summary = {"rows": rows, "pieces": status, "total_seconds": args.seconds, "env": env}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    md = ["# Peers, one GPU run", "", "```", env.strip(), "```", "",
          "| peer | run | config | batch | prompt | gen | KV/seq at end | decode tok/s | step ms | peak GB "
          "| rounds | round ms | round share | steady tok/s |",
          "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        md.append(f"| {r['peer']} | {r['run']} | {r['config']} | {r['batch']} | {r['prompt_len']} | {r['gen']} "
                  f"| {fmt(r['kv_per_seq_end'])} | {fmt(r['decode_tok_s'])} | {fmt(r['mean_step_ms'], 2)} "
                  f"| {fmt(r.get('peak_mem_gb'), 2)} | {fmt(r.get('eviction_rounds'))} "
                  f"| {fmt(r.get('evict_round_ms'), 2)} | {fmt(r.get('evict_share'), 4)} "
                  f"| {fmt(r.get('steady_tok_s'))} |")
    md += ["", "Pieces (rc 124/137 = timed out):", "", "| piece | rc | s |", "|---|---|---:|"]
    md += [f"| {p['piece']} | {p['rc']} | {p['seconds']} |" for p in status]
    if args.seconds is not None:
        md += ["", f"Total: {args.seconds} s."]
    (out / "summary.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
