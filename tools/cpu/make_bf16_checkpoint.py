#!/usr/bin/env python3
"""Writes a random-weight bf16 HF checkpoint directory of a real model shape, for measuring the CPU
backend's 16-bit path (load time, decode tok/s) at a size the test fixtures do not reach.

    python3 tools/cpu/make_bf16_checkpoint.py configs/shapes/qwen2.5-0.5b.json OUT_DIR [--seed 1]

Weights: normal(0, 0.02) rounded to bf16 (norms 1, biases 0), one model.safetensors in HF names;
config.json is the shape file (torch_dtype bfloat16); the tokenizer and generation config are the
tiny qwen2 fixture's (its vocabulary is smaller than the model's, which kvdice accepts; `kvdice bench`
feeds token ids and needs no text, while `generate` would stop at the first sampled id the tiny
tokenizer cannot decode). Needs numpy only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent.parent


def bf16(values: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bits, round to nearest even."""
    u = values.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def tensors(config: dict):
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim", hidden // heads)
    q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
    bias = config["model_type"] == "qwen2"
    yield "model.embed_tokens.weight", (config["vocab_size"], hidden), "normal"
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (hidden,), "ones"
        yield p + "self_attn.q_proj.weight", (q_dim, hidden), "normal"
        yield p + "self_attn.k_proj.weight", (kv_dim, hidden), "normal"
        yield p + "self_attn.v_proj.weight", (kv_dim, hidden), "normal"
        if bias:
            yield p + "self_attn.q_proj.bias", (q_dim,), "zeros"
            yield p + "self_attn.k_proj.bias", (kv_dim,), "zeros"
            yield p + "self_attn.v_proj.bias", (kv_dim,), "zeros"
        if config["model_type"] == "qwen3":
            yield p + "self_attn.q_norm.weight", (head_dim,), "ones"
            yield p + "self_attn.k_norm.weight", (head_dim,), "ones"
        yield p + "self_attn.o_proj.weight", (hidden, q_dim), "normal"
        yield p + "post_attention_layernorm.weight", (hidden,), "ones"
        yield p + "mlp.gate_proj.weight", (inter, hidden), "normal"
        yield p + "mlp.up_proj.weight", (inter, hidden), "normal"
        yield p + "mlp.down_proj.weight", (hidden, inter), "normal"
    yield "model.norm.weight", (hidden,), "ones"
    if not config.get("tie_word_embeddings", False):
        yield "lm_head.weight", (config["vocab_size"], hidden), "normal"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    config = json.loads(args.config.read_text())
    config["torch_dtype"] = "bfloat16"
    rng = np.random.default_rng(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    listing = list(tensors(config))
    header, offset = {}, 0
    for name, shape, _ in listing:
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data buffer 8-byte aligned
    with open(args.out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape, kind in listing:
            if kind == "normal":
                values = rng.normal(0.0, 0.02, size=shape).astype(np.float32)
            elif kind == "ones":
                values = np.ones(shape, np.float32)
            else:
                values = np.zeros(shape, np.float32)
            f.write(bf16(values).tobytes())
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    fixture = REPO / "tests" / "fixtures" / "qwen2"
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(fixture / name, args.out / name)
    print(f"wrote {args.out} ({offset / 1e9:.2f} GB of bf16 weights)")


if __name__ == "__main__":
    main()
