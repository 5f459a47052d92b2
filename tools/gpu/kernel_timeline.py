#!/usr/bin/env python3
"""Where a decode step's time goes, from a kernel_trace.cpp CSV (GPU start/end of every kernel).

Decode steps are the runs of graph-launched kernels (all kernels, when CUPTI names no graph) that
begin with the embedding kernel; the first
--skip steps (eager, recording) are dropped. Per kernel (in step order, same names merged) it prints
launches per step, mean duration, and the mean idle gap before it (its start minus the previous
kernel's end: negative when programmatic dependent launch overlapped them), then the step's wall
time against the sum of kernel durations and the GPU's busy time (union of the intervals).

--totals lists kernels by total time instead (what an eviction benchmark needs: its rounds are not
decode steps, and embed kernels of its setup would split it wrongly).

--positions PERIOD,FIRST,COUNT instead lists the mean time per position in the step (its end minus the
previous kernel's end: the positions sum to the step), and the mean over COUNT repeats of PERIOD
kernels starting at position FIRST (one decoder layer: 8,18,32 for layers 2-33 of a Qwen3 batch-1 step,
whose embed and first norm are positions 0 and 1).

usage: kernel_timeline.py TRACE.csv [--skip N] [--json OUT] [--totals | --positions PERIOD,FIRST,COUNT]
"""
import argparse
import csv
import json
import re
from collections import OrderedDict


def short(name):
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"kvdice::backend::cuda::(\(anonymous namespace\)::)?", "", name)
    name = re.sub(r"kvdice::policy::cuda::(\(anonymous namespace\)::)?", "", name)
    return name.split("(")[0][:70]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--totals", action="store_true")
    ap.add_argument("--positions", type=positions_arg)
    args = ap.parse_args()
    rows = [r for r in csv.DictReader(open(args.trace))]
    ks = sorted(((int(r["start_ns"]), int(r["end_ns"]), short(r["name"]), int(r["graph_id"]), int(r["grid_x"]))
                 for r in rows), key=lambda k: k[0])
    steps, cur = [], None
    any_graph = any(k[3] != 0 for k in ks)
    for k in ks:
        if k[3] == 0 and any_graph:  # eager launches (prefill, first steps) end the current step
            cur = None
            continue
        if k[2].startswith("embed_kernel"):
            cur = []
            steps.append(cur)
        if cur is not None:
            cur.append(k)
    starts = [st[0][0] for st in steps]
    periods = [b - a for a, b in zip(starts[args.skip:-1], starts[args.skip + 1:])]
    steps = steps[args.skip:-1] if len(steps) > args.skip + 1 else steps
    if not steps or args.totals:
        # Not a decode trace (an eviction benchmark, say): kernels by total time.
        graphs = sorted({k[3] for k in ks})
        print(f"{len(ks)} kernels, graph ids {graphs[:8]}; kernels by total time:")
        totals = OrderedDict()
        for (s, e, name, _, grid) in ks:
            d = totals.setdefault(name, [0, 0, grid])
            d[0] += 1
            d[1] += e - s
        for name, (cnt, tot, grid) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:25]:
            print(f"{name:70s} {cnt:7d} x {tot/cnt/1e3:9.2f} us = {tot/1e6:9.2f} ms  grid {grid}")
        return
    if args.positions:
        print_positions(steps, *args.positions)
        return
    per = OrderedDict()
    walls, sums, busys = [], [], []
    for i, st in enumerate(steps):
        prev_end = st[0][0]
        busy, hi = 0, st[0][0]
        for (s, e, name, _, grid) in st:
            d = per.setdefault(name, {"n": 0, "dur": 0, "gap": 0, "grid": grid})
            d["n"] += 1
            d["dur"] += e - s
            d["gap"] += s - prev_end
            prev_end = e
            busy += max(0, e - max(s, hi))
            hi = max(hi, e)
        end = st[-1][1]
        walls.append(end - st[0][0])
        sums.append(sum(e - s for (s, e, *_rest) in st))
        busys.append(busy)
    n = len(steps)
    wall = sum(walls) / n
    print(f"{n} steps, {len(steps[0])} kernels each: wall {wall/1e3:.1f} us, kernel sum {sum(sums)/n/1e3:.1f} us, "
          f"busy {sum(busys)/n/1e3:.1f} us ({100*sum(busys)/sum(walls):.1f} %)")
    if periods:
        print(f"step period (start to next start, host turnaround included): {sum(periods)/len(periods)/1e3:.1f} us")
    print(f"{'kernel':70s} {'/step':>6s} {'mean us':>8s} {'gap us':>7s} {'us/step':>8s} {'share':>6s} grid")
    table = []
    for name, d in sorted(per.items(), key=lambda kv: -(kv[1]["dur"] + max(kv[1]["gap"], 0))):
        per_step = d["n"] / n
        row = {"kernel": name, "per_step": per_step, "mean_us": d["dur"] / d["n"] / 1e3,
               "mean_gap_us": d["gap"] / d["n"] / 1e3, "us_per_step": (d["dur"] + d["gap"]) / n / 1e3,
               "grid_x": d["grid"]}
        row["share"] = row["us_per_step"] * 1e3 / wall
        table.append(row)
        print(f"{name:70s} {per_step:6.1f} {row['mean_us']:8.2f} {row['mean_gap_us']:7.2f} "
              f"{row['us_per_step']:8.1f} {100*row['share']:5.1f}% {d['grid']}")
    if args.json:
        json.dump({"steps": n, "wall_us": wall / 1e3,
                   "period_us": sum(periods) / len(periods) / 1e3 if periods else None, "kernels": table}, open(args.json, "w"), indent=1)


def positions_arg(text):
    try:
        period, first, count = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"want PERIOD,FIRST,COUNT (three integers), got {text!r}")
    if period < 1 or first < 0 or count < 1:
        raise argparse.ArgumentTypeError(f"want PERIOD >= 1, FIRST >= 0, COUNT >= 1, got {text!r}")
    return period, first, count


def print_positions(steps, period, first, count):
    n = len(steps[0])
    steps = [st for st in steps if len(st) == n]  # a step of another shape (a round) would misalign
    inc, names = [0.0] * n, [""] * n
    for st in steps:
        prev = st[0][0]
        for i, (s, e, name, _, grid) in enumerate(st):
            inc[i] += (e - prev) / len(steps) / 1e3
            names[i] = f"{name} grid {grid}"
            prev = e
    print(f"{len(steps)} steps of {n} kernels, {sum(inc):.1f} us; us per position (end - previous end):")
    for i in range(n):
        print(f"{i:4d} {inc[i]:8.2f}  {names[i]}")
    if first + period * count > n:
        print(f"no mean: {count} repeats of {period} from position {first} run past the step's {n} kernels")
    else:
        print(f"mean over {count} repeats of positions {first}..{first + period - 1}:")
        for j in range(period):
            mean = sum(inc[first + k * period + j] for k in range(count)) / count
            print(f"     {mean:8.2f}  {names[first + j]}")


if __name__ == "__main__":
    main()
