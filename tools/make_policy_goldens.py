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


def random_block_pp(case, block=32, grid="slot0"):
    # The reference numbers blocks over the whole cache, prompt included (arange(n_cand) // B).
    order = chrono(case, case["n_protected"])
    origin = case["n_protected"] if grid == "slot0" else 0
    s = stream_of(case)
    score = {slot: s.u64((origin + i) // block) for i, slot in enumerate(order)}
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


def carrier_mix(case, heads=(2, 3, 5), q=1.0, anti=False):
    """Carrier heads: random_pp's draw; the others: the floor(q * (K_sel - pl)) newest, then the same
    draw over the rest in slot order (mix: q = 1)."""
    pl, keep = case["n_protected"], case["keep"]
    if (case["kv_head"] in heads) != anti:
        _, rest = fisher_yates_victims(stream_of(case), range(pl, case["n_candidates"]),
                                       case["n_candidates"] - keep)
        return sorted(set(range(pl)) | set(rest))
    free = keep - pl
    n_rec = min(free, math.floor(q * free))
    order = chrono(case, pl)
    kept = set(range(pl)) | set(order[len(order) - n_rec:])
    if n_rec == free:
        return sorted(kept)
    pool = [s for s in range(pl, case["n_candidates"]) if s not in kept]
    _, rest = fisher_yates_victims(stream_of(case), pool, len(pool) - (free - n_rec))
    return sorted(kept | set(rest))


def random_vrange_pp(case, share=0.25):
    """The floor(share * (K_sel - pl)) widest value ranges (ties: older first), then the draw."""
    pl, keep = case["n_protected"], case["keep"]
    free = keep - pl
    n_tag = min(free, math.floor(share * free))
    vr = np.array(case["value_range"], dtype=np.float32)
    kept = set(range(pl)) | set(top(case, chrono(case, pl), vr, n_tag))
    pool = [s for s in range(pl, case["n_candidates"]) if s not in kept]
    _, rest = fisher_yates_victims(stream_of(case), pool, len(pool) - (free - n_tag))
    return sorted(kept | set(rest))


def bf16(values):
    """fp32 values rounded to bf16 (nearest, ties to even), as float64."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def windowed_attention(case, pool=5, temperature=1.0, fp32=False):
    """In float64; with fp32 (the policies' precision=fp32) the queries and keys first rounded to bf16
    as policy/window_attention.h rounds them (its fp32 arithmetic after that stays within near-ties)."""
    n, d, g, nq = case["n_candidates"], case["head_dim"], case["group"], case["n_queries"]
    as_input = bf16 if fp32 else (lambda v: np.array(v, dtype=np.float32).astype(np.float64))
    k = as_input(case["keys"]).reshape(n, d)
    q = as_input(case["window_queries"]).reshape(g, nq, d)
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


def snapkv(case, protect, pool=5, fp32=False):
    pl = case["n_protected"] if protect else 0
    score = windowed_attention(case, pool, fp32=fp32)
    return list(range(pl)) + top(case, chrono(case, pl), score, case["keep"] - pl)


def h2o(case, protect):
    pl = case["n_protected"] if protect else 0
    score = np.array(case["attention_mass"], dtype=np.float32)
    return list(range(pl)) + top(case, chrono(case, pl), score, case["keep"] - pl)


def vase(case, protect, large=0.25, sinks=4, fp32=False):
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
    att = windowed_attention(case, fp32=fp32)
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


def redundancy(case, threshold=None):
    """R-KV key redundancy, written in the reference's index space: candidates in age order (the
    reference stores them chronologically), cosine matrix of k / (|k| + 1e-8) with the diagonal
    zeroed; with a threshold, each row's largest index whose similarity exceeds it (0 when none) is
    zeroed (retain_direction="last"); mean over rows, softmax over candidates."""
    n, d = case["n_candidates"], case["head_dim"]
    order = chrono(case, 0)
    k = np.array(case["keys"], dtype=np.float32).astype(np.float64).reshape(n, d)[order]
    kn = k / (np.linalg.norm(k, axis=-1, keepdims=True) + 1e-8)
    cs = kn @ kn.T
    np.fill_diagonal(cs, 0.0)
    if threshold is not None:
        ind = np.where(cs > threshold, np.arange(n)[None, :], 0)
        spare = ind.max(axis=-1)
        cs[np.arange(n), spare] = 0.0
    m = cs.mean(axis=0)
    e = np.exp(m - m.max())
    red = np.zeros(n)
    red[order] = e / e.sum()
    return red


def rkv(case, protect, lam=0.5, pool=5, fp32=False):
    pl = case["n_protected"] if protect else 0
    score = lam * windowed_attention(case, pool, fp32=fp32) - (1 - lam) * redundancy(case)
    return list(range(pl)) + top(case, chrono(case, pl), score, case["keep"] - pl)


def rkv_official(case, lam=0.1, queries=8, pool=7, threshold=0.5):
    n, d, g, nq = case["n_candidates"], case["head_dim"], case["group"], case["n_queries"]
    k = np.array(case["keys"], dtype=np.float32).astype(np.float64).reshape(n, d)
    q = np.array(case["window_queries"], dtype=np.float32).astype(np.float64).reshape(g, nq, d)
    q = q[:, :min(queries, nq)]                              # the ring is newest first
    logits = (q @ k.T / math.sqrt(d)).max(axis=0)            # max over the GQA group: [queries, n]
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    imp = p.mean(axis=0)
    order = chrono(case, 0)
    chron = imp[order]
    padded = np.pad(chron, (pool // 2, pool // 2), constant_values=-np.inf)
    pooled = np.stack([padded[i:i + n] for i in range(pool)]).max(axis=0)
    importance = np.zeros(n)
    importance[order] = pooled
    score = lam * importance - (1 - lam) * redundancy(case, threshold)
    return top(case, chrono(case, 0), score, case["keep"])


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
    "random_block_pp:block=4,grid=candidates": lambda c: random_block_pp(c, block=4, grid="candidates"),
    "random_pp_rec": random_pp_rec,
    "random_pp_rec:recent=0.25": lambda c: random_pp_rec(c, recent=0.25),
    "carrier_mix": carrier_mix,
    "carrier_mix:heads=0+1": lambda c: carrier_mix(c, heads=(0, 1)),
    "carrier_softmix": lambda c: carrier_mix(c, q=0.5),
    "carrier_softmix:heads=1,q=0.3": lambda c: carrier_mix(c, heads=(1,), q=0.3),
    "anti_mix": lambda c: carrier_mix(c, anti=True),
    "anti_mix:heads=0": lambda c: carrier_mix(c, heads=(0,), anti=True),
    "anti_softmix": lambda c: carrier_mix(c, q=0.5, anti=True),
    "random_vrange_pp": random_vrange_pp,
    "random_vrange_pp:share=0.6": lambda c: random_vrange_pp(c, share=0.6),
    "rkv": lambda c: rkv(c, False),
    "rkv_pp": lambda c: rkv(c, True),
    "rkv:lambda=0.3,pool=1": lambda c: rkv(c, False, lam=0.3, pool=1),
    "rkv_official": rkv_official,
    "snapkv:precision=fp32": lambda c: snapkv(c, False, fp32=True),
    "snapkv_pp:pool=1,precision=fp32": lambda c: snapkv(c, True, pool=1, fp32=True),
    "vase_pp:precision=fp32": lambda c: vase(c, True, fp32=True),
    "rkv:lambda=0.3,pool=1,precision=fp32": lambda c: rkv(c, False, lam=0.3, pool=1, fp32=True),
    "rkv_pp:precision=fp32": lambda c: rkv(c, True, fp32=True),
    "rkv_official:lambda=0.5,queries=3,pool=3,threshold=0.2": lambda c: rkv_official(
        c, lam=0.5, queries=3, pool=3, threshold=0.2),
}
PROTECTS = {"random_block_pp", "random_pp_rec", "carrier_mix", "carrier_softmix", "anti_mix", "anti_softmix", "random_vrange_pp", "snapkv_pp", "h2o_pp", "vase_pp", "rkv_pp"}


# ---- TriAttention (whole-model scoring; the formula of docs/policies.md, evaluated literally) ------
def triattention_scores(case, max_offset=65536):
    L, H, g, d, n = case["n_layers"], case["n_kv_heads"], case["group"], case["head_dim"], case["n_candidates"]
    F, pl, R = d // 2, case["n_protected"], case["appended"]
    keys = np.array(case["keys"], dtype=np.float32).astype(np.float64).reshape(L, H, n, d)
    pos = np.array(case["positions"], dtype=np.float64).reshape(H, n)
    qre = np.array(case["q_mean_real"], dtype=np.float32).astype(np.float64).reshape(L, H * g, F)
    qim = np.array(case["q_mean_imag"], dtype=np.float32).astype(np.float64).reshape(L, H * g, F)
    qabs = np.array(case["q_abs_mean"], dtype=np.float32).astype(np.float64).reshape(L, H * g, F)
    omega = np.array(case["omega"], dtype=np.float32).astype(np.float64)
    fs2 = np.array(case["freq_scale"], dtype=np.float32).astype(np.float64) ** 2
    offsets = []
    v = 1
    while v <= max_offset:
        offsets.append(float(v))
        v *= 2
    offsets = np.array(offsets)
    total = np.zeros((H, n))
    for layer in range(L):
        for h in range(H):
            kc = keys[layer, h, :, :F] + 1j * keys[layer, h, :, F:]
            kpre = kc * np.exp(-1j * pos[h][:, None] * omega[None, :])        # un-rotate by position
            best = np.full(n, -np.inf)
            for qh in range(h * g, (h + 1) * g):
                eq = qre[layer, qh] + 1j * qim[layer, qh]
                rel = eq[None, :] * np.conj(kpre)
                phi = np.arctan2(rel.imag, rel.real)
                amp = np.abs(eq)[None, :] * np.abs(kpre)
                extra = (qabs[layer, qh] - np.abs(eq))[None, :] * np.abs(kpre)
                delta = R - pos[h]
                phase = (delta[:, None, None] + offsets[None, :, None]) * omega[None, None, :] + phi[:, None, :]
                base = (amp[:, None, :] * fs2 * np.cos(phase)).sum(-1)            # [n, offsets]
                add = (extra * fs2).sum(-1)
                sc = (base + add[:, None]).mean(-1)
                dec = sc[pl:]
                if dec.size > 1:
                    sc = (sc - dec.mean()) / max(dec.std(), 1e-6)
                best = np.maximum(best, sc)
            total[h] += best / L
    return total


def triattention(case, max_offset=65536):
    score = triattention_scores(case, max_offset)
    pl, keep = case["n_protected"], case["keep"]
    out = []
    for h in range(case["n_kv_heads"]):
        c = {"positions": case["positions"][h * case["n_candidates"]:(h + 1) * case["n_candidates"]],
             "n_candidates": case["n_candidates"]}
        out.append(sorted(list(range(pl)) + top(c, chrono(c, pl), score[h], keep - pl)))
    return out


def make_tri_case(rng, L, H, g, d, n, keep, pl, appended, freq_scale=1.0, theta=10000.0, prompt_scale=1.0):
    F = d // 2
    positions = []
    for _ in range(H):   # prompt at slots [0, pl); the rest scrambled, distinct per head
        hist = rng.choice(np.arange(pl, appended - 8), size=n - pl, replace=False)
        positions += list(range(pl)) + [int(p) for p in hist]
    eq = rng.normal(size=(L, H * g, F)) + 1j * rng.normal(size=(L, H * g, F))
    eq *= rng.uniform(0.1, 3.0, size=(L, H * g, 1))         # heads of different scale (z-norm matters)
    q_abs = np.abs(eq) * rng.uniform(1.0, 1.6, size=eq.shape)
    omega = theta ** (-np.arange(F) * 2.0 / d)
    return {
        "n_layers": L, "n_kv_heads": H, "group": g, "head_dim": d, "n_candidates": n, "keep": keep,
        "n_protected": pl, "appended": appended, "positions": positions,
        "keys": np.round(rng.normal(size=(L, H, n, d)) * np.where(np.arange(n) < pl, prompt_scale, 1.0)[:, None],
                         3).ravel().tolist(),
        "q_mean_real": np.round(eq.real, 4).ravel().tolist(),
        "q_mean_imag": np.round(eq.imag, 4).ravel().tolist(),
        "q_abs_mean": np.round(q_abs + 1e-3, 4).ravel().tolist(),
        "omega": np.float32(omega).tolist(),
        "freq_scale": [freq_scale] * F,
    }


# ---- TriAttention calibration on the tests/fixtures/qwen3 model (numpy forward) -------------------
def load_safetensors(path):
    import struct
    b = Path(path).read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32"
        lo, hi = e["data_offsets"]
        out[name] = np.frombuffer(b[8 + n + lo:8 + n + hi], dtype=np.float32).reshape(e["shape"]).astype(np.float64)
    return out


def qwen3_pre_rope_queries(weights, config, tokens):
    """[layer][token][head][head_dim] queries after q_norm, before RoPE, of one sequence from position 0."""
    L, H, Hkv, d = (config["num_hidden_layers"], config["num_attention_heads"], config["num_key_value_heads"],
                    config["head_dim"])
    eps, theta = config["rms_norm_eps"], config["rope_parameters"]["rope_theta"]
    w = lambda name: weights[name]
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g
    inv = theta ** (-np.arange(d // 2) * 2.0 / d)
    T = len(tokens)
    ang = np.arange(T)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(x):   # [T, heads, d], rotate-half
        a, b = x[..., :d // 2], x[..., d // 2:]
        c, s = cos[:, None, :], sin[:, None, :]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)

    x = w("model.embed_tokens.weight")[tokens]
    out = []
    for i in range(L):
        p = f"model.layers.{i}."
        h = rms(x, w(p + "input_layernorm.weight"))
        q = (h @ w(p + "self_attn.q_proj.weight").T).reshape(T, H, d)
        k = (h @ w(p + "self_attn.k_proj.weight").T).reshape(T, Hkv, d)
        v = (h @ w(p + "self_attn.v_proj.weight").T).reshape(T, Hkv, d)
        q = rms(q, w(p + "self_attn.q_norm.weight"))
        k = rms(k, w(p + "self_attn.k_norm.weight"))
        out.append(q.copy())
        q, k = rope(q), rope(k)
        att = np.zeros((T, H, d))
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for hq in range(H):
            kv = hq // (H // Hkv)
            logits = q[:, hq] @ k[:, kv].T / math.sqrt(d) + mask
            pr = np.exp(logits - logits.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            att[:, hq] = pr @ v[:, kv]
        x = x + att.reshape(T, H * d) @ w(p + "self_attn.o_proj.weight").T
        h = rms(x, w(p + "post_attention_layernorm.weight"))
        gate, up = h @ w(p + "mlp.gate_proj.weight").T, h @ w(p + "mlp.up_proj.weight").T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w(p + "mlp.down_proj.weight").T
    return out


def through_query_ring(qs, config):
    """Pre-RoPE queries [L, T, H, d] (positions 0..T-1) as kvdice calibrate recovers them from the KV
    pool's query ring: rotated, stored as bf16 (the ring's dtype), rotated back in double."""
    d = qs.shape[-1]
    F = d // 2
    inv = config["rope_parameters"]["rope_theta"] ** (-np.arange(F) * 2.0 / d)
    ang = np.arange(qs.shape[1])[None, :, None, None] * inv
    cos, sin = np.cos(ang), np.sin(ang)
    a, b = qs[..., :F], qs[..., F:]
    ring = bf16(np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1))
    a, b = ring[..., :F], ring[..., F:]
    return np.concatenate([a * cos + b * sin, b * cos - a * sin], axis=-1)


def calibration_golden(root, rng):
    config = json.loads((root / "tests/fixtures/qwen3/config.json").read_text())
    weights = load_safetensors(root / "tests/fixtures/qwen3/model.safetensors")
    tokens = [int(t) for t in rng.integers(0, config["vocab_size"], size=100)]
    segment = 40   # segments of 40, 40 and 20 tokens, each from position 0
    sums = None
    for begin in range(0, len(tokens), segment):
        qs = np.stack(qwen3_pre_rope_queries(weights, config, tokens[begin:begin + segment]))  # [L, T, H, d]
        qs = through_query_ring(qs, config)
        F = qs.shape[-1] // 2
        c = qs[..., :F] + 1j * qs[..., F:]
        part = (c.sum(axis=1), np.abs(c).sum(axis=1))
        sums = part if sums is None else (sums[0] + part[0], sums[1] + part[1])
    mean, mag = sums[0] / len(tokens), sums[1] / len(tokens)
    validity = float((np.abs(mean) / mag).max(axis=-1).mean(axis=-1).mean())
    q_norms = [float(np.linalg.norm(weights[f"model.layers.{i}.self_attn.q_proj.weight"]))
               for i in range(config["num_hidden_layers"])]
    return {"tokens": tokens, "segment": segment, "q_mean_real": mean.real.ravel().tolist(),
            "q_mean_imag": mean.imag.ravel().tolist(), "q_abs_mean": mag.ravel().tolist(),
            "validity": validity, "q_weight_norm": q_norms}


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
        # bf16 values, as the KV pool's query ring holds them (3 decimals, then rounded to bf16)
        "window_queries": bf16(np.round(rng.normal(size=(group, n_queries, dim)) * 2, 3)).ravel().tolist(),
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
    tri_cases = [
        make_tri_case(rng, 3, 2, 2, 8, 40, 24, 5, 400),
        make_tri_case(rng, 2, 2, 3, 16, 64, 40, 0, 70000, freq_scale=1.25, theta=1e6),
        make_tri_case(rng, 4, 1, 4, 8, 33, 32, 3, 100),
        # a long prompt of large keys: z-normalising over it instead of the generated tokens shows
        make_tri_case(rng, 3, 2, 2, 8, 48, 32, 20, 300, prompt_scale=4.0),
    ]
    tri_goldens = []
    for ci, case in enumerate(tri_cases):
        tri_goldens.append({"case": ci, "policy": "triattention", "expected_keep": triattention(case)})
        tri_goldens.append({"case": ci, "policy": "triattention:max_offset=64",
                            "expected_keep": triattention(case, max_offset=64)})
    root = Path(__file__).resolve().parent.parent
    out = root / "tests/fixtures/policies/goldens.json"
    out.write_text(json.dumps({"generator": "tools/make_policy_goldens.py", "numpy": np.__version__,
                               "cases": cases, "goldens": goldens, "triattention_cases": tri_cases,
                               "triattention_goldens": tri_goldens,
                               "calibration": calibration_golden(root, rng)}, indent=None) + "\n")
    print(f"wrote {out} ({len(goldens)} keep-sets)")


if __name__ == "__main__":
    main()
