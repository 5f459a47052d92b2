#!/usr/bin/env python3
"""Converts an HF checkpoint (e.g. tools/gpu/make_checkpoint.py's random Qwen3-4B) to an f16 GGUF for
llama.cpp, with llama.cpp's own converter (convert_hf_to_gguf.py + gguf-py, carried in the peers pack).

    python3 make_peer_gguf.py --model .gpu/qwen3-4b --out /tmp/qwen3-4b-f16.gguf \
        [--llama-cpp .gpu-peers/llama.cpp] [--tokenizer auto|own|small] [--outtype f16]

Three things stop the stock converter on our checkpoints, all handled here without editing the
converter's files:
- The BPE pre-tokenizer is identified by hashing the token ids of a fixed test string; a synthetic
  tokenizer matches no known hash, so the converter refuses. Our tokenizers use Qwen2's split regex,
  so we force the answer to "qwen2" (patching TextModel.get_vocab_base_pre in the imported module).
- Without the sentencepiece package the Qwen vocab path dies before its BPE fallback (see convert()).
- A tokenizer can fail to convert for other reasons. `--tokenizer small` (and `auto` after a failed
  first try) uses the committed 746-token Qwen3 fixture tokenizer instead; the converter pads the
  vocabulary to the config's vocab_size with [PAD] tokens, so the embedding and output shapes are
  unchanged. Throughput does not depend on the vocabulary's contents.
The checkpoint directory is never modified: the converter reads a temp folder of symlinks (weights,
config) plus the chosen tokenizer files.
"""
import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json")


def find_small_tokenizer():
    """The 746-token Qwen3 fixture tokenizer: beside this script in the pack, or in the repo."""
    for d in (HERE / "small-tokenizer", HERE.parents[1] / "tests" / "fixtures" / "qwen3"):
        if (d / "tokenizer.json").is_file():
            return d
    sys.exit("error: no small tokenizer found (small-tokenizer/ beside this script or tests/fixtures/qwen3)")


def stage(model, tokenizer_dir, tmp):
    """A folder the converter can read: the checkpoint's files as symlinks, tokenizer from tokenizer_dir."""
    for f in model.iterdir():
        if f.name in TOKENIZER_FILES:
            continue
        (tmp / f.name).symlink_to(f.resolve())
    for name in TOKENIZER_FILES:
        src = tokenizer_dir / name
        if src.is_file():
            shutil.copy(src, tmp / name)
    # The converter asserts max(token id) < vocab_size and pads up to vocab_size.
    cfg = json.loads((model / "config.json").read_text())
    tok = json.loads((tmp / "tokenizer.json").read_text())
    ids = list(tok["model"]["vocab"].values()) + [a["id"] for a in tok.get("added_tokens", [])]
    if max(ids) >= cfg["vocab_size"]:
        raise ValueError(f"tokenizer has id {max(ids)} >= vocab_size {cfg['vocab_size']}")


def convert(llama_cpp, staged, out, outtype):
    sys.path.insert(0, str(llama_cpp))
    import convert_hf_to_gguf  # noqa: E402  (inserts gguf-py into sys.path itself)
    import conversion.base  # noqa: E402

    conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    # Qwen2Model.set_vocab tries SentencePiece first and falls back to BPE on FileNotFoundError,
    # but imports sentencepiece before looking for tokenizer.model: without the package (the GPU
    # machine need not have it) that is a ModuleNotFoundError and the conversion dies.
    spm = conversion.base.TextModel._set_vocab_sentencepiece

    def set_vocab_sentencepiece(self, *a, **kw):
        if not (self.dir_model / "tokenizer.model").is_file():
            raise FileNotFoundError(f"{self.dir_model}/tokenizer.model")
        return spm(self, *a, **kw)

    conversion.base.TextModel._set_vocab_sentencepiece = set_vocab_sentencepiece
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", str(staged), "--outfile", str(out), "--outtype", outtype]
    try:
        convert_hf_to_gguf.main()
    finally:
        sys.argv = argv


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, type=pathlib.Path, help="HF checkpoint folder (config.json, *.safetensors)")
    ap.add_argument("--out", required=True, type=pathlib.Path, help="GGUF file to write")
    ap.add_argument("--llama-cpp", type=pathlib.Path, default=HERE / "llama.cpp",
                    help="folder holding convert_hf_to_gguf.py, conversion/ and gguf-py/")
    ap.add_argument("--tokenizer", choices=("auto", "own", "small"), default="auto",
                    help="own: the checkpoint's; small: the Qwen3 fixture's; auto: own, then small on failure")
    ap.add_argument("--outtype", default="f16", choices=("f16", "bf16", "f32"))
    args = ap.parse_args()

    if not (args.model / "config.json").is_file():
        sys.exit(f"error: {args.model} has no config.json (not an HF checkpoint folder)")
    if not list(args.model.glob("*.safetensors")):
        sys.exit(f"error: {args.model} has no *.safetensors weights")
    if not (args.llama_cpp / "convert_hf_to_gguf.py").is_file():
        sys.exit(f"error: {args.llama_cpp}/convert_hf_to_gguf.py not found (run tools/peers/build_llama_cpp.sh)")
    args.out.parent.mkdir(parents=True, exist_ok=True)

    tries = {"own": ["own"], "small": ["small"], "auto": ["own", "small"]}[args.tokenizer]
    if not (args.model / "tokenizer.json").is_file() and "own" in tries:
        print(f"note: {args.model} has no tokenizer.json; using the small fixture tokenizer")
        tries = ["small"]
    for i, which in enumerate(tries):
        tok_dir = args.model if which == "own" else find_small_tokenizer()
        t0 = time.time()
        with tempfile.TemporaryDirectory(prefix="peer-gguf-") as tmp:
            tmp = pathlib.Path(tmp)
            try:
                stage(args.model, tok_dir, tmp)
                convert(args.llama_cpp, tmp, args.out, args.outtype)
            except (Exception, SystemExit) as e:  # the converter calls sys.exit on some errors
                if i + 1 == len(tries):
                    raise
                print(f"warning: conversion with the {which} tokenizer failed ({type(e).__name__}: {e}); "
                      f"retrying with the small one", file=sys.stderr)
                if args.out.exists():
                    args.out.unlink()
                continue
        size = args.out.stat().st_size
        print(json.dumps({"gguf": str(args.out), "bytes": size, "tokenizer": which, "outtype": args.outtype,
                          "seconds": round(time.time() - t0, 1)}))
        return


if __name__ == "__main__":
    main()
