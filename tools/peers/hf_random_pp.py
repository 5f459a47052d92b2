#!/usr/bin/env python3
"""The paper's HF-harness throughput method, as a peer for `kvdice bench`: transformers (sdpa,
DynamicCache), greedy decoding of a batch of seeded random-token prompts for a fixed number of
tokens (EOS ignored), with `random_pp` eviction applied between decode steps to the DynamicCache's
per-layer key/value tensors, under kvdice's semantics (docs/reference.md §1):

- T (token budget) is the cache length right after a round; it includes the prompt and the window.
  r is the window and the cadence; K_sel = T - r slots are chosen by the rule.
- Trigger: on decode steps only, after the step's token has attended, when len > T and len % r == 0
  (len = the physical cache length; all layers fire on the same step).
- Candidates: every slot but the newest r. The first pl = min(prompt_len, K_sel - 1) slots (the
  prompt, which chronological compaction keeps in front) are always kept. Of the other candidates a
  fresh uniform random subset of K_sel - pl is kept per (sequence, layer, KV head, round): iid U(0,1)
  scores, prompt scores +inf, top-K_sel, kept indices sorted (chronological compaction), then the r
  window slots appended. After the round every layer holds exactly T slots (checked).
- Keys stay post-RoPE; each new token is rotated at its true absolute position (passed as
  position_ids: the count of tokens ever appended), never the physical cache length.
Random draws come from one torch.Generator on the device seeded by --seed (the reference uses the
global unseeded CUDA RNG; kvdice uses Philox keyed per sequence/round/layer/head: same distribution,
not the same bits, which is irrelevant to throughput).

    python3 hf_random_pp.py --model DIR --batch 128 --prompt-len 1024 --gen 2048 \
        --policy random_pp --budget 2048 --window 64 --out run.json [--device cuda] [--check]

Timing: decode only (prefill excluded), wall clock between torch.cuda.synchronize() calls; output
tok/s = batch * gen / decode seconds, eviction rounds included. Each whole-model round is also timed
on its own (synchronize before and after). Peak memory = torch.cuda.max_memory_allocated.
--check tracks every slot's absolute position and verifies the semantics after each round (prompt
kept in front, exactly r unprotected candidates evicted per head, the window intact, chronological
order, T slots); it adds work to each round, so timing runs leave it off.
"""
import argparse
import inspect
import json
import platform
import sys
import time


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="HF checkpoint folder")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--gen", type=int, default=1024, help="decode steps (= output tokens per sequence)")
    ap.add_argument("--policy", choices=("full", "random_pp"), default="full")
    ap.add_argument("--budget", type=int, default=2048, help="T: cache length after a round (random_pp)")
    ap.add_argument("--window", type=int, default=64, help="r: recency window and cadence (random_pp)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=("bf16", "f16", "f32"), default="bf16")
    ap.add_argument("--warmup", type=int, default=2, help="untimed decode steps before timing (cropped away)")
    ap.add_argument("--check", action="store_true", help="verify the eviction semantics after each round")
    ap.add_argument("--out", help="JSON file to write (default: stdout only)")
    args = ap.parse_args(argv)
    for name in ("batch", "prompt_len", "gen"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.policy == "random_pp":
        if not (args.budget > args.window > 0):
            ap.error(f"random_pp needs T > r > 0 (got T={args.budget}, r={args.window})")
        if args.budget % args.window:
            ap.error(f"random_pp needs T % r == 0 (got T={args.budget}, r={args.window})")
    return args


def expected_rounds(prompt_len, gen, budget, window):
    """Rounds the trigger fires in `gen` decode steps (the same rule, on lengths only)."""
    length, rounds = prompt_len, 0
    for _ in range(gen):
        length += 1
        if length > budget and length % window == 0:
            rounds += 1
            length = budget
    return rounds


class RandomPP:
    """random_pp on a transformers DynamicCache: one round over every layer."""

    def __init__(self, torch, budget, window, prompt_len, device, seed, check):
        self.torch = torch
        self.T, self.r = budget, window
        self.k_sel = budget - window
        self.pl = min(prompt_len, self.k_sel - 1)
        if prompt_len >= self.k_sel:
            print(f"warning: prompt ({prompt_len}) >= K_sel ({self.k_sel}): only the first {self.pl} prompt "
                  f"slots are protected (the reference's behaviour; accuracy collapses)", file=sys.stderr)
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)
        self.check = check
        self.positions = None  # per layer [B, Hkv, L] int64 absolute positions (--check only)

    def track(self, layers, batch, prompt_len, device):
        if self.check:
            torch = self.torch
            heads = layers[0][0].shape[1]
            base = torch.arange(prompt_len, device=device).expand(batch, heads, prompt_len)
            self.positions = [base.clone() for _ in layers]

    def append_positions(self, abs_pos):
        if self.positions is not None:
            torch = self.torch
            for i, p in enumerate(self.positions):
                self.positions[i] = torch.cat([p, torch.full_like(p[..., :1], abs_pos)], dim=-1)

    def select(self, b, h, n_cand, device):
        """Kept candidate indices [b, h, K_sel], ascending: the prompt plus a uniform random subset."""
        scores = self.torch.rand((b, h, n_cand), device=device, generator=self.gen)
        scores[..., : self.pl] = float("inf")
        return scores.topk(self.k_sel, dim=-1, sorted=False).indices.sort(dim=-1).values

    def window(self, x, n_cand):
        """The newest r slots, appended after the kept block."""
        return x[:, :, n_cand:]

    def round(self, cache_layers, set_layer):
        torch = self.torch
        for li, (k, v) in enumerate(cache_layers):
            b, h, length, d = k.shape
            n_cand = length - self.r
            keep = self.select(b, h, n_cand, k.device)
            idx = keep.unsqueeze(-1).expand(b, h, self.k_sel, d)
            new_k = torch.cat([k.gather(2, idx), self.window(k, n_cand)], dim=2)
            new_v = torch.cat([v.gather(2, idx), self.window(v, n_cand)], dim=2)
            set_layer(li, new_k, new_v)
            if self.positions is not None:
                old = self.positions[li]
                new = torch.cat([old.gather(2, keep), self.window(old, n_cand)], dim=2)
                self.verify(old, new, n_cand)
                self.positions[li] = new

    def verify(self, old, new, n_cand):
        torch = self.torch
        T, r, pl = self.T, self.r, self.pl
        assert new.shape[-1] == T, f"cache holds {new.shape[-1]} slots after a round, expected T={T}"
        assert torch.equal(new[..., :pl], old[..., :pl]), "a protected prompt slot was evicted or moved"
        assert torch.equal(new[..., T - r:], old[..., n_cand:]), "the recency window was not kept intact"
        assert bool((new[..., 1:] > new[..., :-1]).all()), "kept slots are not in chronological order"
        # exactly r unprotected candidates evicted per (sequence, head): count the survivors
        cand = old[..., pl:n_cand]
        kept = new[..., pl : T - r]
        assert kept.shape[-1] == cand.shape[-1] - r, "did not evict exactly r candidates"
        survived = (cand.unsqueeze(-1) == kept.unsqueeze(-2)).any(-1).sum(-1)
        assert bool((survived == cand.shape[-1] - r).all()), "kept slots are not a subset of the candidates"


def cache_accessors(cache):
    """(list of (keys, values) per layer, setter) for a transformers DynamicCache (4.5x and 5.x)."""
    if hasattr(cache, "layers"):  # transformers >= 4.56: cache.layers[i].keys / .values
        def get():
            return [(layer.keys, layer.values) for layer in cache.layers]

        def set_layer(i, k, v):
            cache.layers[i].keys, cache.layers[i].values = k, v
    else:  # older: cache.key_cache / cache.value_cache lists
        def get():
            return list(zip(cache.key_cache, cache.value_cache))

        def set_layer(i, k, v):
            cache.key_cache[i], cache.value_cache[i] = k, v
    return get, set_layer


def run(args, policy_cls=None):
    """One measurement; returns (result dict, output token ids [batch, gen]). policy_cls replaces
    RandomPP (tests plant bugs through it)."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch sees no CUDA device")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]

    t0 = time.time()
    config = AutoConfig.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="sdpa")
    model.to(device).eval()
    load_s = time.time() - t0
    vocab = config.vocab_size

    gen_cpu = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(0, vocab, (args.batch, args.prompt_len), generator=gen_cpu).to(device)

    policy = None
    if args.policy == "random_pp":
        policy = (policy_cls or RandomPP)(torch, args.budget, args.window, args.prompt_len, device, args.seed + 1, args.check)

    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    weights_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    # transformers 5.2x renamed forward's `past_key_values` to `cache` (the old name warns).
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def step(cache, tokens, abs_pos):
        # position_ids: the true absolute position (RoPE); the mask and the cache use physical lengths.
        pos = torch.full((tokens.shape[0], 1), abs_pos, dtype=torch.long, device=device)
        out = model(input_ids=tokens, position_ids=pos, use_cache=True, **{cache_kw: cache})
        return out.logits[:, -1].argmax(-1, keepdim=True)

    with torch.inference_mode():
        cache = DynamicCache()
        get_layers, set_layer = cache_accessors(cache)
        sync()
        t_pf = time.time()
        out = model(input_ids=prompts, use_cache=True, logits_to_keep=1, **{cache_kw: cache})
        tokens = out.logits[:, -1].argmax(-1, keepdim=True)
        del out
        sync()
        prefill_s = time.time() - t_pf
        if policy:
            policy.track(get_layers(), args.batch, args.prompt_len, device)

        # Warm-up steps (kernel selection, allocator growth), then the cache is cropped back to the
        # prompt so the timed run starts from the same state (the eviction RNG is not touched).
        if args.warmup:
            for w in range(args.warmup):
                step(cache, tokens, args.prompt_len + w)
            for i, (k, v) in enumerate(get_layers()):  # crop() changed meaning across 5.x: slice
                set_layer(i, k[:, :, : args.prompt_len].clone(), v[:, :, : args.prompt_len].clone())
            sync()

        outputs = torch.empty((args.batch, args.gen), dtype=torch.long, device=device)
        round_ms, rounds = [], 0
        first_round_t = None
        length = args.prompt_len  # physical cache length (the trigger's len)
        sync()
        t_dec = time.time()
        for s in range(args.gen):
            abs_pos = args.prompt_len + s
            tokens = step(cache, tokens, abs_pos)
            outputs[:, s : s + 1] = tokens
            length += 1
            if policy:
                policy.append_positions(abs_pos)
                if length > args.budget and length % args.window == 0:
                    sync()
                    tr = time.time()
                    if first_round_t is None:
                        first_round_t, first_round_step = tr, s + 1
                    policy.round(get_layers(), set_layer)
                    sync()
                    round_ms.append((time.time() - tr) * 1e3)
                    rounds += 1
                    length = args.budget
        sync()
        t_end = time.time()
        decode_s = t_end - t_dec

    lengths = {k.shape[2] for k, _ in get_layers()}
    if lengths != {length}:
        sys.exit(f"error: cache lengths {sorted(lengths)} differ from the expected {length}")
    if outputs.shape != (args.batch, args.gen):
        sys.exit("error: wrong number of output tokens")
    if policy:
        want = expected_rounds(args.prompt_len, args.gen, args.budget, args.window)
        if rounds != want:
            sys.exit(f"error: {rounds} eviction rounds, expected {want}")

    tok = args.batch * args.gen
    res = {
        "peer": "hf_random_pp",
        "policy": args.policy,
        "model": args.model,
        "batch": args.batch,
        "prompt_len": args.prompt_len,
        "gen": args.gen,
        "final_cache_len": length,
        "budget_T": args.budget if policy else None,
        "window_r": args.window if policy else None,
        "budget_convention": "T counts prompt and window (reference code)" if policy else None,
        "seed": args.seed,
        "dtype": args.dtype,
        "attn_implementation": "sdpa",
        "cache": "DynamicCache",
        "device": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
        "load_s": round(load_s, 3),
        "prefill_s": round(prefill_s, 4),
        "decode_s": round(decode_s, 4),
        "output_tokens": tok,
        "decode_tok_s": round(tok / decode_s, 2),
        "mean_step_ms": round(decode_s / args.gen * 1e3, 3),
        "eviction_rounds": rounds,
        "evict_round_ms_mean": round(sum(round_ms) / len(round_ms), 3) if round_ms else None,
        "evict_round_ms_min": round(min(round_ms), 3) if round_ms else None,
        "evict_round_ms_max": round(max(round_ms), 3) if round_ms else None,
        "evict_share_of_decode": round(sum(round_ms) / 1e3 / decode_s, 4) if round_ms else None,
        "weights_bytes": weights_bytes,
        "peak_mem_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        "checked_semantics": bool(policy and args.check),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
    }
    if first_round_t is not None and first_round_step < args.gen:
        steady = args.gen - first_round_step
        res["steady_state"] = {
            "from_step": first_round_step,
            "steps": steady,
            "tok_s": round(args.batch * steady / (t_end - first_round_t), 2),
            "note": "from the first round's start to the end: the cache oscillates between T and T+r",
        }
    return res, outputs.cpu()


def main(argv=None):
    args = parse_args(argv)
    res, _ = run(args)
    text = json.dumps(res, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
