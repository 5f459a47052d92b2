#!/usr/bin/env python3
"""transformers' own logits for a checkpoint, as goldens for kvdice's end-to-end GPU parity test
(tests/backend/test_model_gpu.cpp): a seeded random prompt, the prefill, then `--steps` greedy decode
steps with the KV cache, all in bf16 on the GPU with sdpa attention (the paper's HF setting).

    python3 tools/gpu/golden_logits.py --model .gpu/qwen3-4b --prompt-len 100 --steps 64

Writes into the model directory: golden.json (prompt ids, greedy tokens, dtype, transformers version)
and golden_logits.f32 ([1 + steps, vocab] float32: the logits after the prefill, then after each fed
greedy token).
"""
import argparse
import json
import pathlib

import torch
import transformers
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-len", type=int, default=100)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    path = pathlib.Path(args.model)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    config = json.loads((path / "config.json").read_text())
    n_regular = config["vocab_size"] - 64  # stay clear of the special tokens at the top
    gen = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(0, n_regular, (args.prompt_len,), generator=gen).tolist()
    rows, tokens = [], []
    with torch.no_grad():
        out = model(torch.tensor([prompt], device="cuda"), use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1].float()
        for _ in range(args.steps):
            rows.append(logits.cpu())
            token = int(torch.argmax(logits))
            tokens.append(token)
            out = model(torch.tensor([[token]], device="cuda"), past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()
        rows.append(logits.cpu())
        tokens.append(int(torch.argmax(logits)))
    torch.stack(rows).numpy().astype("float32").tofile(path / "golden_logits.f32")
    (path / "golden.json").write_text(json.dumps({
        "prompt": prompt, "greedy_tokens": tokens, "steps": args.steps, "vocab": config["vocab_size"],
        "dtype": "bfloat16", "attention": "sdpa", "transformers": transformers.__version__, "torch": torch.__version__,
    }))
    print(f"{path}: golden logits for a {len(prompt)}-token prompt and {args.steps} greedy steps")


if __name__ == "__main__":
    main()
