#!/usr/bin/env python3
"""A random-weight HF checkpoint of a real model's shape, for parity and throughput work on the GPU
machine (it has torch and transformers but no network and no weights).

    python3 tools/gpu/make_checkpoint.py --shape configs/shapes/qwen3-4b.json --out .gpu/qwen3-4b [--seed 0]
    python3 tools/gpu/make_checkpoint.py --shape ... --out DIR --no-weights   # tokenizer + config only

The tokenizer is a synthetic byte-level BPE that covers the whole vocabulary (every id decodes): the
256 byte symbols, all byte pairs, then byte triples, then the family's special tokens (taken, with the
chat template, from the committed fixture of the same family) at the top ids. Weights are drawn by
transformers' own initialisation (std = initializer_range) in bf16 on the GPU, seeded.
"""
import argparse
import copy
import json
import pathlib
import shutil

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures"


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def synthetic_bpe(n_regular):
    symbols = bytes_to_unicode()
    vocab = {s: i for i, s in enumerate(symbols)}
    merges = []
    for a in symbols:
        for b in symbols:
            if len(vocab) >= n_regular:
                return vocab, merges
            vocab[a + b] = len(vocab)
            merges.append(f"{a} {b}")
    for a in symbols:
        for b in symbols:
            for c in symbols:
                if len(vocab) >= n_regular:
                    return vocab, merges
                vocab[a + b + c] = len(vocab)
                merges.append(f"{a + b} {c}")
    return vocab, merges


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, help="HF config.json of the shape (configs/shapes/*.json)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-weights", action="store_true")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads(pathlib.Path(args.shape).read_text())
    family = config["model_type"]
    fixture = FIXTURES / family
    tok = json.loads((fixture / "tokenizer.json").read_text())
    tok_config = json.loads((fixture / "tokenizer_config.json").read_text())
    gen = json.loads((fixture / "generation_config.json").read_text())

    vocab_size = config["vocab_size"]
    added = sorted(tok["added_tokens"], key=lambda a: a["id"])
    n_regular = vocab_size - len(added)
    vocab, merges = synthetic_bpe(n_regular)
    assert len(vocab) == n_regular, (len(vocab), n_regular)
    old_to_new = {}
    for i, a in enumerate(added):
        old_to_new[a["id"]] = n_regular + i
        a["id"] = n_regular + i
    tok["added_tokens"] = added
    tok["model"]["vocab"] = vocab
    tok["model"]["merges"] = merges
    if tok.get("post_processor") and "special_tokens" in tok["post_processor"]:
        for v in tok["post_processor"]["special_tokens"].values():
            v["ids"] = [old_to_new.get(i, i) for i in v["ids"]]
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    tok_config["added_tokens_decoder"] = {str(old_to_new[int(k)]): v for k, v in tok_config["added_tokens_decoder"].items()}
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2, ensure_ascii=False))

    remap = lambda x: [old_to_new[i] for i in x] if isinstance(x, list) else old_to_new.get(x, x)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if gen.get(key) is not None:
            gen[key] = remap(gen[key])
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    fixture_config = json.loads((fixture / "config.json").read_text())
    for key in ("bos_token_id", "eos_token_id"):
        if fixture_config.get(key) is not None:
            config[key] = remap(fixture_config[key])
    (out / "config.json").write_text(json.dumps(config, indent=2))
    if args.no_weights:
        return

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(args.seed)
    hf_config = AutoConfig.from_pretrained(out)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.bfloat16)
    model.save_pretrained(out, max_shard_size="4GB")
    # save_pretrained rewrote config.json in its own dialect; keep ours (the hub dialect) beside it.
    (out / "config.json").write_text(json.dumps(config, indent=2))
    n = sum(p.numel() for p in model.parameters())
    print(f"{out}: {family}, {n / 1e9:.3f} B parameters, vocab {vocab_size}")


if __name__ == "__main__":
    main()
