#!/usr/bin/env python3
"""Golden outputs of the default real model (Qwen2.5-Coder-0.5B-Instruct, GGUF) from an independent
reference: transformers loading the same GGUF (the gguf package dequantises it to fp32) and the
tokenizer transformers builds from the GGUF vocabulary. tests/real_model compares kvdice against these.

Usage (after `kvdice pull default`):
    python3 tools/make_real_goldens.py --gguf ~/.cache/kvdice/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

Needs torch, transformers (>= 5), gguf, accelerate (transformers refuses GGUF loading without it).
Writes tests/fixtures/real/{tokenizer,logits}.json; both stay far below 1 MB.
"""

import argparse
import hashlib
import json
import pathlib
import unicodedata

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# Texts chosen to hit every tokenizer stage: special tokens inside text, the split regex's
# contractions / letters / single digits / punctuation runs / newline and whitespace rules,
# multi-byte UTF-8 (CJK, emoji ZWJ sequences, combining marks that NFC would compose), and code.
CORPUS = [
    "Hello, world!",
    "hello world   and    many spaces\tand\ttabs",
    "  leading spaces and trailing   ",
    "\n\n\nnewlines\r\n\r\nand CRLF\n",
    "I'm sure they'll say it's what we've done; YOU'RE, WE'D, SHE'LL",
    "1234567890 3.14159 1,000,000 -42 0x1F 2024-05-17",
    "你好，世界！我爱自然语言处理。",
    "日本語のテキストとカタカナ、한국어 텍스트",
    "family: 👨\u200d👩\u200d👧\u200d👦 flag: 🏳️\u200d🌈 thumbs: 👍🏽 🤖🚀✨",
    "cafe\u0301 vs caf\u00e9, n\u0303 vs \u00f1, A\u030a vs \u00c5",
    "Ελληνικά, русский текст, עברית, العربية, हिन्दी",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }  // dot\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "text<|im_end|>glued<|endoftext|>tokens <|im_start|> spaced <tool_call>{\"a\": 1}</tool_call>",
    "<|im_start <|im_end|x| <| |> not quite special tokens",
    "Math: ∑_{i=1}^{n} i² = n(n+1)/2, √2 ≈ 1.414, ∞ ≠ −∞",
    "   \n \t \n",
    "a",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!!! ...??? ---",
    "URL: https://example.com/path?q=a%20b&x=1#frag e-mail: someone@example.org",
    "mixedCASEIdentifiers snake_case_names kebab-case-names CONSTANT_VALUE __dunder__",
]

PROMPTS = [
    "What is 17 * 23? Answer briefly.",
    "Write a Python function that returns the factorial of n.",
    "用一句话解释什么是缓存。",
]

NEW_TOKENS = 8
TOP_K = 32


def chatml(user: str) -> str:
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def sha256_of(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def tokenizer_golden(tok, source: dict) -> dict:
    cases = []
    for text in CORPUS:
        nfc_text = unicodedata.normalize("NFC", text)
        cases.append({
            "text": text,
            # GGUF metadata carries no normaliser, and neither transformers nor llama.cpp applies one to
            # a GGUF vocabulary; the original tokenizer.json of Qwen2.5 normalises to NFC. Both are
            # recorded so either engine setting is checked against the reference.
            "ids": tok.encode(text, add_special_tokens=False),
            "ids_nfc": tok.encode(nfc_text, add_special_tokens=False),
            "ids_no_special": tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"],
        })
    return {"source": source, "cases": cases}


def logits_golden(tok, model, source: dict) -> dict:
    prompts = []
    for user in PROMPTS:
        text = chatml(user)
        prompt_ids = tok.encode(text, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
            generated = out[0, len(prompt_ids):].tolist()
            # Teacher-forced pass over prompt + generated: exactly what the C++ test runs, so the stored
            # logits do not depend on how generate() splits the work into incremental steps.
            full = torch.tensor([prompt_ids + generated])
            logits = model(full).logits[0].float()
        steps = []
        for k in range(len(generated)):
            row = logits[len(prompt_ids) - 1 + k]
            top = torch.topk(row, TOP_K)
            assert top.indices[0].item() == generated[k], "teacher-forced argmax differs from generate()"
            steps.append({
                "top_ids": top.indices.tolist(),
                "top_logits": [float(v) for v in top.values.tolist()],
                "top1_margin": float(top.values[0] - top.values[1]),
            })
        prompts.append({
            "user": user,
            "text": text,
            "prompt_ids": prompt_ids,
            "generated_ids": generated,
            "generated_text": tok.decode(generated),
            "steps": steps,
        })
    return {"source": source, "top_k": TOP_K, "prompts": prompts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", type=pathlib.Path, required=True, help="the assembled default model")
    parser.add_argument("--out", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "real")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    gguf = args.gguf.absolute()
    source = {
        "gguf_file": gguf.name,
        "gguf_sha256": sha256_of(gguf),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tokenizer.json").write_text(
        json.dumps(tokenizer_golden(tok, source), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    golden = logits_golden(tok, model, source)
    (args.out / "logits.json").write_text(json.dumps(golden, ensure_ascii=False) + "\n", encoding="utf-8")
    for p in golden["prompts"]:
        margins = [s["top1_margin"] for s in p["steps"]]
        print(f"{p['user']!r} -> {p['generated_text']!r} (smallest top-1 margin {min(margins):.3f})")


if __name__ == "__main__":
    main()
