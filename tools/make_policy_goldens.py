#!/usr/bin/env python3
"""Independent numpy reference of the selection rules in docs/policies.md.

Writes tests/fixtures/policies/goldens.json: small hand-built candidate sets (positions scrambled the
way compaction scrambles them, keys, window queries, value ranges, attention mass) and, for each
policy spec, the keep-set the formula gives. tests/policy/test_policy_goldens.cpp runs the C++
policies on the same inputs. Nothing here is imported by the build; rerun after changing a rule:

    python3 tools/make_policy_goldens.py
"""
import json
import math
from pathlib import Path

import numpy as np

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1


# ---- core/philox.h, written out again ---------------------------------------------------------
def philox(counter, key):
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


class Stream:
    def __init__(self, key, a, b, c):
        self.key, self.a, self.b, self.c = key, a, b, c

    def u64(self, i):
        v = philox((i, self.a, self.b, self.c), self.key)
        return (v[0] << 32) | v[1]

    def below(self, i, n):
        return (self.u64(i) * n) >> 64


def stream_of(case):
    return Stream(tuple(case["key"]), case["round"], case["layer"], case["kv_head"])


# ---- the rules --------------------------------------------------------------------------------
def chrono(case, first):
    pos = case["positions"]
    return sorted(range(first, case["n_candidates"]), key=lambda s: pos[s])


def top(case, pool, score, n):
    """n slots of pool with the highest score; ties: smaller position first."""
    pos = case["positions"]
    return sorted(pool, key=lambda s: (-score[s], pos[s]))[:n]


def random_block_pp(case, block=32):
    order = chrono(case, case["n_protected"])
    s = stream_of(case)
    score = {slot: s.u64(i // block) for i, slot in enumerate(order)}
    return list(range(case["n_protected"])) + top(case, order, score, case["keep"] - case["n_protected"])


def fisher_yates_victims(stream, pool, victims):
    pool = list(pool)
    for i in range(victims):
        j = i + stream.below(i, len(pool) - i)
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:victims], pool[victims:]


def random_pp_rec(case, recent=0.5):
    pl, keep = case["n_protected"], case["keep"]
    n_rec = min(keep - pl, round(recent * keep))  # Python's round: half to even
    order = chrono(case, pl)
    kept = set(range(pl)) | set(order[len(order) - n_rec:])
    pool = [s for s in range(pl, case["n_candidates"]) if s not in kept]
    _, rest = fisher_yates_victims(stream_of(case), pool, len(pool) - (keep - pl - n_rec))
    return sorted(kept | set(rest))


def windowed_attention(case, pool=5, temperature=1.0):
    n, d, g, nq = case["n_candidates"], case["head_dim"], case["group"], case["n_queries"]
    k = np.array(case["keys"], dtype=np.float32).astype(np.float64).reshape(n, d)
    q = np.array(case["window_queries"], dtype=np.float32).astype(np.float64).reshape(g, nq, d)
    logits = q @ k.T / (math.sqrt(d) * temperature)            # [g, nq, n]
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    mean = p.mean(axis=1)                                       # [g, n]
    order = chrono(case, 0)
    chron = mean[:, order]
    padded = np.pad(chron, ((0, 0), (pool // 2, pool // 2)))
    pooled = np.stack([padded[:, i:i + n] for i in range(pool)]).sum(axis=0) / pool  # count_include_pad
    score = np.zeros(n)
    score[order] = pooled.mean(axis=0)
    return score


def snapkv(case, protect, pool=5):
    pl = case["n_protected"] if protect else 0
    score = windowed_attention(case, pool)
    return list(range(pl)) + top(case, chrono(case, pl), score, case["keep"] - pl)


def h2o(case, protect):
    pl = case["n_protected"] if protect else 0
    score = np.array(case["attention_mass"], dtype=np.float32)
    return list(range(pl)) + top(case, chrono(case, pl), score, case["keep"] - pl)


def vase(case, protect, large=0.25, sinks=4):
    pl, keep = (case["n_protected"] if protect else 0), case["keep"]
    kept = set(range(pl))
    order = chrono(case, 0)
    sinks_outside = 0
    for s in order[:sinks]:
        if s not in kept and len(kept) < keep:
            kept.add(s)
            sinks_outside += 1
    n_large = math.floor(large * case["budget"])
    rng_vals = np.array(case["value_range"], dtype=np.float32)
    pool = [s for s in order if s not in kept]
    n_range = min(max(n_large - sinks_outside, 0), keep - len(kept))
    kept |= set(top(case, pool, rng_vals, n_range))
    att = windowed_attention(case)
    left = [s for s in pool if s not in kept]           # age order
    w_max = max(att[s] for s in left) if left else 0.0
    weight = {s: (math.floor(att[s] / w_max * 2.0**40) if w_max > 0 else 0) for s in left}
    st = stream_of(case)
    draw = 0
    while len(kept) < keep:
        total = sum(weight[s] for s in left)
        if total == 0:
            pick = left[0]
        else:
            target = (st.u64(draw) * total) >> 64
            run = 0
            for s in left:
                run += weight[s]
                if run > target:
                    pick = s
                    break
        left.remove(pick)
        kept.add(pick)
        draw += 1
    return sorted(kept)


POLICIES = {
    "snapkv": lambda c: snapkv(c, False),
    "snapkv_pp": lambda c: snapkv(c, True),
    "snapkv:pool=1": lambda c: snapkv(c, False, pool=1),
    "h2o": lambda c: h2o(c, False),
    "h2o_pp": lambda c: h2o(c, True),
    "vase": lambda c: vase(c, False),
    "vase_pp": lambda c: vase(c, True),
    "vase:large=0.5,sinks=2": lambda c: vase(c, False, large=0.5, sinks=2),
    "random_block_pp": random_block_pp,
    "random_block_pp:block=4": lambda c: random_block_pp(c, block=4),
    "random_block_pp:block=1": lambda c: random_block_pp(c, block=1),
    "random_pp_rec": random_pp_rec,
    "random_pp_rec:recent=0.25": lambda c: random_pp_rec(c, recent=0.25),
}
PROTECTS = {"random_block_pp", "random_pp_rec", "snapkv_pp", "h2o_pp", "vase_pp"}


# ---- the inputs -------------------------------------------------------------------------------
def make_case(rng, n, keep, pl, group, dim, n_queries, layer, kv_head, rnd):
    positions = list(range(pl)) + [int(p) for p in (pl + rng.permutation(n - pl) * 2 + 1)]
    return {
        "layer": layer, "kv_head": kv_head, "round": rnd,
        "key": [int(x) for x in rng.integers(0, 1 << 32, size=2)],
        "n_candidates": n, "keep": keep, "n_protected": pl, "budget": keep + 8,
        "appended": max(positions) + 9,
        "positions": positions,
        "head_dim": dim, "group": group, "n_queries": n_queries,
        "keys": np.round(rng.normal(size=(n, dim)), 3).ravel().tolist(),
        "window_queries": np.round(rng.normal(size=(group, n_queries, dim)) * 2, 3).ravel().tolist(),
        "value_range": np.round(rng.uniform(0, 4, size=n), 3).tolist(),
        "attention_mass": np.round(rng.uniform(0, 2, size=n), 2).tolist(),  # 2 decimals: ties happen
    }


def main():
    rng = np.random.default_rng(20260707)
    cases = [
        make_case(rng, 40, 24, 5, 2, 8, 8, 0, 0, 0),
        make_case(rng, 64, 40, 0, 4, 16, 8, 3, 1, 7),
        make_case(rng, 96, 48, 20, 2, 8, 8, 1, 3, 2),
        make_case(rng, 33, 32, 3, 1, 4, 3, 2, 0, 1),
    ]
    goldens = []
    for ci, case in enumerate(cases):
        for spec, rule in POLICIES.items():
            c = dict(case)
            if spec.split(":")[0] not in PROTECTS:
                c["n_protected"] = 0  # what the round passes to an unprotected policy
            goldens.append({"case": ci, "policy": spec, "n_protected": c["n_protected"],
                            "expected_keep": sorted(int(s) for s in rule(c))})
    out = Path(__file__).resolve().parent.parent / "tests/fixtures/policies/goldens.json"
    out.write_text(json.dumps({"generator": "tools/make_policy_goldens.py", "numpy": np.__version__,
                               "cases": cases, "goldens": goldens}, indent=None) + "\n")
    print(f"wrote {out} ({len(goldens)} keep-sets)")


if __name__ == "__main__":
    main()
