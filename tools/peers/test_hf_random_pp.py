#!/usr/bin/env python3
"""CPU checks of hf_random_pp.py on the tiny committed Qwen3 fixture (needs torch + transformers;
not part of `make test`, whose CI has neither):

    python3 tools/peers/test_hf_random_pp.py [--model tests/fixtures/qwen3]

1. `--policy full` decodes exactly what transformers' own greedy `generate` decodes (EOS ignored):
   our step loop (explicit absolute position_ids, DynamicCache) is the model, not a variant of it.
2. `random_pp` with a budget that is never reached decodes the same tokens as `full`.
3. `random_pp` with rounds: the per-round semantic check passes and the round count matches the rule.
4. Planted bugs the per-round check must catch: an unprotected prompt, a window slot dropped, an
   unsorted keep-set, one slot too many kept.
5. With rounds, the decoded tokens differ from full attention (eviction really changed the cache).
"""
import argparse
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import hf_random_pp as H  # noqa: E402


def args_for(model, **kw):
    argv = ["--model", model, "--device", "cpu", "--dtype", "f32", "--batch", "3", "--prompt-len", "20",
            "--gen", "120", "--warmup", "1"]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)] if v is not True else [f"--{k.replace('_', '-')}"]
    return H.parse_args(argv)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(HERE.parents[1] / "tests" / "fixtures" / "qwen3"))
    model = ap.parse_args().model
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    failures = checks = 0

    def expect(cond, what):
        nonlocal failures, checks
        print(("ok   " if cond else "FAIL ") + what)
        checks += 1
        failures += 0 if cond else 1

    # 1. full == transformers' greedy generate
    res_full, out_full = H.run(args_for(model, policy="full"))
    m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32, attn_implementation="sdpa").eval()
    prompts = torch.randint(0, m.config.vocab_size, (3, 20), generator=torch.Generator().manual_seed(0))
    # generate's first token comes from the prefill; our step s feeds token s and records token s+1
    ref = m.generate(prompts, do_sample=False, max_new_tokens=121, min_new_tokens=121, eos_token_id=None,
                     pad_token_id=0)[:, 20:]
    expect(torch.equal(out_full, ref[:, 1:]), "full: tokens equal transformers generate (greedy, 120 steps)")

    # 2. random_pp that never fires == full
    res_nf, out_nf = H.run(args_for(model, policy="random_pp", budget=256, window=64, check=True))
    expect(res_nf["eviction_rounds"] == 0 and torch.equal(out_nf, out_full), "random_pp below budget == full")

    # 3. random_pp with rounds: checked semantics, round count
    res_rp, out_rp = H.run(args_for(model, policy="random_pp", budget=64, window=16, check=True))
    want = H.expected_rounds(20, 120, 64, 16)
    expect(want == 4 and res_rp["eviction_rounds"] == want, f"random_pp rounds = {res_rp['eviction_rounds']} (want 4)")
    expect(res_rp["final_cache_len"] == 20 + 120 - 4 * 16, "final cache length")

    # 5. eviction changed what the model attends to
    expect(not torch.equal(out_rp, out_full), "random_pp with rounds decodes differently from full")

    # 4. planted bugs: subclasses of RandomPP that break one rule; the per-round check must catch each
    class NoProtect(H.RandomPP):  # the prompt competes like any other candidate
        def select(self, b, h, n_cand, device):
            scores = torch.rand((b, h, n_cand), generator=self.gen)
            return scores.topk(self.k_sel, dim=-1).indices.sort(dim=-1).values

    class Unsorted(H.RandomPP):  # keep-set not compacted chronologically
        def select(self, b, h, n_cand, device):
            return super().select(b, h, n_cand, device).flip(-1)

    class Duplicate(H.RandomPP):  # one candidate kept twice, another lost
        def select(self, b, h, n_cand, device):
            keep = super().select(b, h, n_cand, device)
            keep[..., -1] = keep[..., -2]
            return keep

    class WindowShift(H.RandomPP):  # the window taken one slot too early: the newest token lost
        def window(self, x, n_cand):
            return x[:, :, n_cand - 1 : -1]

    for name, cls in (("prompt not protected", NoProtect), ("keep-set unsorted", Unsorted),
                      ("duplicate keep index", Duplicate), ("window shifted", WindowShift)):
        try:
            H.run(args_for(model, policy="random_pp", budget=64, window=16, check=True, gen=60), cls)
            caught = False
        except AssertionError as e:
            caught = True
            print(f"      ({name}: {e})")
        expect(caught, f"planted bug caught: {name}")

    print(f"{checks - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
