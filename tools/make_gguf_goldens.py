#!/usr/bin/env python3
"""Builds the GGUF test fixtures in tests/fixtures/gguf/ and their expected values, computed by the
python `gguf` package (an implementation independent of kvdice's reader):

  quants.gguf            a few blocks of every ggml type kvdice dequantises: data quantised by
                         gguf.quants where it can, random bit patterns (with finite scales) for every
                         type, and real blocks sliced out of a Q4_K_M model file when one is given;
                         plus one IQ4_NL tensor that kvdice must refuse.
  quants.expected.f32    gguf.quants.dequantize of every tensor above, concatenated (little-endian),
  quants.expected.json   with name -> {offset, count, shape (PyTorch order), type}.
  metadata.gguf          metadata of every GGUF value type and a custom alignment, two tensors;
  metadata.expected.json the values written (floats as written after rounding to f32).
  tiny_qwen2.gguf,       tiny models for config/tokenizer/name mapping; the llama one has q/k rows
  tiny_llama.gguf        permuted the way convert_hf_to_gguf.py does and a llama3 rope_freqs table;
  tiny_models.expected.json  the HF-order q/k weights and the numbers the files were built from.

Usage: python3 tools/make_gguf_goldens.py [--model /tmp/models/qwen2.5-coder-0.5b.gguf]
Needs numpy and gguf (pip install gguf). Deterministic for a given model file.
"""
import argparse
import json
import math
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T, GGUFValueType as V

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "gguf")

# Byte offsets of the fp16 scale fields inside one block of each type (ggml-common.h layouts).
HALF_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
QUANTISABLE = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]


def random_blocks(rng, qtype, n_blocks):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in HALF_FIELDS.get(qtype, []):
        # finite scales of either sign spanning subnormal to ~4 keep the outputs finite
        h = (rng.standard_normal(n_blocks) * np.exp(rng.uniform(-12, 1, n_blocks))).astype(np.float16)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(n_blocks, 2)
    return raw


def random_16bit(rng, n, is_bf16):
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    exp_mask, exp_all = (0x7F80, 0x7F80) if is_bf16 else (0x7C00, 0x7C00)
    nan = ((bits & exp_mask) == exp_all) & ((bits & (0x7F if is_bf16 else 0x3FF)) != 0)
    bits[nan] &= ~np.uint16(exp_mask & 0x4000)  # clear one exponent bit: no NaNs (they have no exact order)
    return bits


def write_quants(model_path):
    rng = np.random.default_rng(20240611)
    path = os.path.join(OUT, "quants.gguf")
    w = gguf.GGUFWriter(path, arch="kvdice-test")
    for qtype in QUANTISABLE:
        data = (rng.standard_normal((4, 64)) * rng.uniform(0.01, 3)).astype(np.float32)
        data[0, :5] = [0.0, -0.0, 1e-8, -3.5, 7.25]
        q = gguf.quants.quantize(data, qtype)
        if qtype in (T.F32, T.F16):
            w.add_tensor(f"{qtype.name}.quantized", q)
        else:
            w.add_tensor(f"{qtype.name}.quantized", q, raw_dtype=qtype)
    for qtype in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]:
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        n_blocks = 8 if block == 32 else 4
        raw = random_blocks(rng, qtype, n_blocks).reshape(2, -1)
        w.add_tensor(f"{qtype.name}.random", raw, raw_dtype=qtype)
    f16 = random_16bit(rng, 256, False).reshape(4, 64)
    w.add_tensor("F16.random", f16.view(np.float16))
    bf16 = random_16bit(rng, 256, True).reshape(4, 64)
    w.add_tensor("BF16.random", bf16.view(np.uint8).reshape(4, 128), raw_dtype=T.BF16)
    # a 3-d F32 tensor checks dimension order
    w.add_tensor("F32.3d", rng.standard_normal((2, 3, 32)).astype(np.float32))
    # a type kvdice does not dequantise
    w.add_tensor("IQ4_NL.unsupported", rng.integers(0, 256, (1, 36), dtype=np.uint8), raw_dtype=T.IQ4_NL)

    if model_path:
        reader = gguf.GGUFReader(model_path)
        seen = set()
        for t in reader.tensors:
            qt = T(t.tensor_type)
            if qt in seen or qt not in HALF_FIELDS:
                continue
            seen.add(qt)
            block, size = gguf.GGML_QUANT_SIZES[qt]
            n_blocks = 16 if block == 32 else 8
            flat = np.asarray(t.data).view(np.uint8).reshape(-1)
            start = (flat.size // size // 2) * size  # from the middle of the tensor
            raw = flat[start:start + n_blocks * size].copy().reshape(1, -1)
            w.add_tensor(f"{qt.name}.real", raw, raw_dtype=qt)
            print(f"real {qt.name} blocks from {t.name}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    reader = gguf.GGUFReader(path)
    index, chunks, offset = {}, [], 0
    for t in reader.tensors:
        qt = T(t.tensor_type)
        if qt == T.IQ4_NL:
            continue
        values = gguf.quants.dequantize(np.asarray(t.data), qt).astype(np.float32)
        shape = [int(x) for x in reversed(t.shape)]
        values = values.reshape(-1)
        index[t.name] = {"offset": offset, "count": int(values.size), "shape": shape, "type": qt.name}
        chunks.append(values)
        offset += values.size
    np.concatenate(chunks).astype("<f4").tofile(os.path.join(OUT, "quants.expected.f32"))
    with open(os.path.join(OUT, "quants.expected.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)


def f32(x):
    return float(np.float32(x))


def write_metadata():
    path = os.path.join(OUT, "metadata.gguf")
    w = gguf.GGUFWriter(path, arch="kvdice-test")
    w.add_custom_alignment(64)
    values = [
        ("test.u8", 200, V.UINT8, None), ("test.i8", -100, V.INT8, None),
        ("test.u16", 60000, V.UINT16, None), ("test.i16", -30000, V.INT16, None),
        ("test.u32", 4000000000, V.UINT32, None), ("test.i32", -2000000000, V.INT32, None),
        ("test.f32", 0.1, V.FLOAT32, None), ("test.bool", True, V.BOOL, None),
        ("test.string", "héllo ✓", V.STRING, None), ("test.u64", 2**63 + 5, V.UINT64, None),
        ("test.i64", -(2**62), V.INT64, None), ("test.f64", 0.1, V.FLOAT64, None),
        ("test.array.u8", [1, 2, 255], V.ARRAY, V.UINT8), ("test.array.i32", [-1, 0, 7], V.ARRAY, V.INT32),
        ("test.array.f32", [0.5, -2.25, 0.1], V.ARRAY, V.FLOAT32),
        ("test.array.bool", [True, False, True], V.ARRAY, V.BOOL),
        ("test.array.string", ["a b", "", "Ġthe"], V.ARRAY, V.STRING),
        ("test.array.nested", [[1, 2], [3]], V.ARRAY, V.ARRAY),
    ]
    expected = {"general.architecture": {"type": "string", "value": "kvdice-test"},
                "general.alignment": {"type": "u32", "value": 64}}
    names = {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32", V.INT32: "i32",
             V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string", V.UINT64: "u64", V.INT64: "i64",
             V.FLOAT64: "f64", V.ARRAY: "array"}
    for key, val, vtype, sub in values:
        if vtype == V.ARRAY and sub == V.ARRAY:
            w.add_key_value(key, val, vtype, sub)
            expected[key] = {"type": "array[array[i32]]", "value": val}
            continue
        w.add_key_value(key, val, vtype, sub)
        type_name = names[vtype] if vtype != V.ARRAY else f"array[{names[sub]}]"
        if vtype == V.FLOAT32:
            val = f32(val)
        if sub == V.FLOAT32:
            val = [f32(x) for x in val]
        expected[key] = {"type": type_name, "value": val}
    rng = np.random.default_rng(7)
    w.add_tensor("small.f32", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("small.q8_0", gguf.quants.quantize(rng.standard_normal((2, 32)).astype(np.float32), T.Q8_0),
                 raw_dtype=T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    reader = gguf.GGUFReader(path)
    tensors = {}
    for t in reader.tensors:
        tensors[t.name] = {"dims": [int(x) for x in t.shape], "type": T(t.tensor_type).name,
                           "data_start": int(t.data_offset)}
    with open(os.path.join(OUT, "metadata.expected.json"), "w") as f:
        json.dump({"metadata": expected, "tensors": tensors, "version": 3}, f, indent=1, ensure_ascii=False)


def llama_permute(weights, n_head, n_head_kv):
    # convert_hf_to_gguf.py LlamaModel.permute
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def llama3_rope_factors(base, dim, factor, low, high, old_ctx):
    # convert_hf_to_gguf.py LlamaModel.generate_extra_tensors, in float32 like torch there
    freqs = 1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_tiny_models():
    rng = np.random.default_rng(11)
    expected = {}
    vocab = ["a", "b", "c", "ab", "Ġ", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "abc"]
    types = [1, 1, 1, 1, 1, 3, 3, 3, 4, 1]
    hidden, ffn, heads, kv_heads, head_dim, layers = 32, 48, 4, 2, 8, 2
    for arch in ["qwen2", "llama"]:
        path = os.path.join(OUT, f"tiny_{arch}.gguf")
        w = gguf.GGUFWriter(path, arch=arch)
        w.add_block_count(layers)
        w.add_context_length(512)
        w.add_embedding_length(hidden)
        w.add_feed_forward_length(ffn)
        w.add_head_count(heads)
        w.add_head_count_kv(kv_heads)
        w.add_rope_freq_base(500000.0 if arch == "llama" else 1000000.0)
        w.add_layer_norm_rms_eps(1e-5 if arch == "llama" else 1e-6)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("llama-bpe" if arch == "llama" else "qwen2")
        w.add_token_list(vocab)
        w.add_token_types(types)
        w.add_token_merges(["a b", "ab c"])
        w.add_eos_token_id(6 if arch == "qwen2" else 7)
        w.add_bos_token_id(7)
        if arch == "qwen2":
            w.add_add_bos_token(False)
            w.add_chat_template("{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}")
        w.add_tensor("token_embd.weight", rng.standard_normal((len(vocab), hidden)).astype(np.float32))
        w.add_tensor("output_norm.weight", rng.standard_normal(hidden).astype(np.float32))
        exp = {}
        for layer in range(layers):
            q = rng.standard_normal((heads * head_dim, hidden)).astype(np.float32)
            k = rng.standard_normal((kv_heads * head_dim, hidden)).astype(np.float32)
            qb = rng.standard_normal(heads * head_dim).astype(np.float32)
            if arch == "llama":
                w.add_tensor(f"blk.{layer}.attn_q.weight", llama_permute(q, heads, heads))
                w.add_tensor(f"blk.{layer}.attn_k.weight", llama_permute(k, heads, kv_heads))
            else:
                w.add_tensor(f"blk.{layer}.attn_q.weight", q)
                w.add_tensor(f"blk.{layer}.attn_k.weight", k)
                w.add_tensor(f"blk.{layer}.attn_q.bias", qb)
            w.add_tensor(f"blk.{layer}.attn_v.weight", rng.standard_normal((kv_heads * head_dim, hidden)).astype(np.float32))
            w.add_tensor(f"blk.{layer}.attn_output.weight", rng.standard_normal((hidden, hidden)).astype(np.float32))
            w.add_tensor(f"blk.{layer}.ffn_up.weight", rng.standard_normal((ffn, hidden)).astype(np.float32))
            if layer == 0:
                exp["q_proj"] = q.reshape(-1).tolist()
                exp["k_proj"] = k.reshape(-1).tolist()
        if arch == "llama":
            factors = llama3_rope_factors(500000.0, head_dim, 8.0, 1.0, 4.0, 8192)
            w.add_tensor("rope_freqs.weight", factors)
            exp["rope_factors"] = factors.tolist()
        else:
            w.add_tensor("output.weight", rng.standard_normal((len(vocab), hidden)).astype(np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        expected[arch] = exp
    with open(os.path.join(OUT, "tiny_models.expected.json"), "w") as f:
        json.dump(expected, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="/tmp/models/qwen2.5-coder-0.5b.gguf",
                    help="a real GGUF to slice K-quant/Q5_0/Q8_0 blocks from (skipped if absent)")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    model = args.model if args.model and os.path.exists(args.model) else None
    if model is None:
        print(f"warning: {args.model} not found; quants.gguf gets no real-model blocks")
    write_quants(model)
    write_metadata()
    write_tiny_models()


if __name__ == "__main__":
    main()
