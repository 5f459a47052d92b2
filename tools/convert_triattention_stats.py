#!/usr/bin/env python3
"""Converts TriAttention calibration statistics from the official implementation's format into the
file kvdice's `triattention` policy reads (docs/policies.md, "TriAttention calibration").

The official format (github.com/WeianMao/triattention, its calibration scripts and loaders) is a
`torch.save`d dict:
    {"metadata": {"head_dim": D, "rope_style": "half", "num_layers": L, "num_kv_heads": Hkv,
                  "sampled_heads": [[layer, head], ...], ...},
     "stats": {"layer{LL:02d}_head{HH:02d}": {"q_mean_real": [D/2], "q_mean_imag": [D/2],
                                              "q_abs_mean": [D/2]}, ...}}
per (layer, query head, RoPE band f) the complex mean of the pre-RoPE query (band f = dims f and
f + D/2, rotate-half RoPE) and its mean magnitude: the same quantities `kvdice calibrate` measures.
kvdice's file adds what the official one leaves to the model: the RoPE frequencies (`omega`), the
per-band RoPE magnitude (`freq_scale`) and each layer's q projection norm (the model's fingerprint),
so this converter reads the model's checkpoint (config.json and its safetensors weights) beside the
statistics.

    python3 tools/convert_triattention_stats.py --official qwen3-4b.pt --model Qwen3-4B/ --out qwen3-4b.tri

Reading the `.pt` file needs torch (loaded with weights_only=True: tensors, dicts, lists and numbers
only, no code runs); the conversion itself needs only numpy, so `convert()` can be called with the
dict already in memory.
"""
from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

FORMAT = "kvdice-triattention-stats"


class ConversionError(Exception):
    """A problem with the inputs, named for the user."""


# --- the model: config.json and the q projection weights ------------------------------------------

def model_shape(model_dir: Path) -> dict:
    """Layers, heads, head_dim and RoPE of an HF checkpoint's config.json, as kvdice's loader reads them."""
    path = model_dir / "config.json"
    if not path.is_file():
        raise ConversionError(f"{model_dir}: no config.json (give --model an HF checkpoint directory)")
    cfg = json.loads(path.read_text())
    text = cfg.get("text_config", cfg)  # multimodal wrappers nest the language model's config
    try:
        n_layers = int(text["num_hidden_layers"])
        n_heads = int(text["num_attention_heads"])
        n_kv_heads = int(text.get("num_key_value_heads", n_heads))
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // n_heads)
    except (KeyError, TypeError, ValueError) as e:
        raise ConversionError(f"{path}: missing or malformed field {e}") from None
    rope = dict(text.get("rope_parameters") or {})
    rope_theta = float(rope.get("rope_theta", text.get("rope_theta", 10000.0)))
    scaling = text.get("rope_scaling") or {}
    rope_type = rope.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    return {"architecture": (cfg.get("architectures") or ["?"])[0], "n_layers": n_layers, "n_heads": n_heads,
            "n_kv_heads": n_kv_heads, "head_dim": head_dim, "rope_theta": rope_theta, "rope_type": rope_type,
            "partial_rotary_factor": float(rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 1.0)))}


def _safetensors_header(path: Path) -> tuple[dict, int]:
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ConversionError(f"{path}: too short for a safetensors file")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 * 1024 * 1024:
            raise ConversionError(f"{path}: safetensors header of {n} bytes is not plausible")
        header = json.loads(f.read(n))
    return header, 8 + n


def _read_tensor(path: Path, name: str, entry: dict, data_start: int) -> np.ndarray:
    # The `safetensors` package's numpy API has no bfloat16, the dtype most checkpoints use, so the
    # few tensors needed here are read from the file's documented layout directly.
    begin, end = entry["data_offsets"]
    with path.open("rb") as f:
        f.seek(data_start + begin)
        raw = f.read(end - begin)
    dtype = entry["dtype"]
    if dtype == "BF16":
        values = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    elif dtype == "F16":
        values = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    elif dtype == "F32":
        values = np.frombuffer(raw, dtype="<f4")
    else:
        raise ConversionError(f"{path}: tensor {name} is {dtype}; expected BF16, F16 or F32")
    return values.reshape(entry["shape"])


def q_weight_norms(model_dir: Path, n_layers: int, q_rows: int) -> list[float]:
    """Frobenius norm of each layer's q projection (q_rows = heads x head_dim rows), summed in double as
    kvdice does."""
    found: dict[int, float] = {}
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ConversionError(f"{model_dir}: no .safetensors weights (the q projection norms come from them)")
    for path in files:
        header, data_start = _safetensors_header(path)
        for name, entry in header.items():
            fused = name.endswith("self_attn.qkv_proj.weight")  # Phi-3/Phi-4: q's rows come first
            if name == "__metadata__" or not (fused or name.endswith("self_attn.q_proj.weight")):
                continue
            parts = name.split(".")
            try:
                layer = int(parts[parts.index("layers") + 1])
            except (ValueError, IndexError):
                continue
            w = _read_tensor(path, name, entry, data_start).astype(np.float64)
            if fused:
                w = w[: q_rows]
            found[layer] = float(math.sqrt(float(np.sum(w * w))))
    missing = [l for l in range(n_layers) if l not in found]
    if missing:
        raise ConversionError(f"{model_dir}: no q_proj weight for layer(s) {missing[:8]} in its safetensors files")
    return [found[l] for l in range(n_layers)]


# --- the conversion ---------------------------------------------------------------------------------

def _vector(value, key: str, field: str, bands: int) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().to("cpu").float().numpy()
    a = np.asarray(value, dtype=np.float64).reshape(-1)
    if a.size != bands:
        raise ConversionError(f"stats[{key!r}][{field!r}] has {a.size} values; head_dim/2 = {bands}")
    if not np.all(np.isfinite(a)):
        raise ConversionError(f"stats[{key!r}][{field!r}] holds a non-finite value")
    return a


def convert(payload: dict, shape: dict, norms: list[float], source: str) -> tuple[dict, dict]:
    """The official payload -> (tensors as float32 arrays, metadata strings) of kvdice's file."""
    if not isinstance(payload, dict) or "metadata" not in payload or "stats" not in payload:
        raise ConversionError(f"{source}: not TriAttention statistics (expected a dict with 'metadata' and 'stats')")
    meta, stats = payload["metadata"], payload["stats"]
    L, H, D = shape["n_layers"], shape["n_heads"], shape["head_dim"]
    if int(meta.get("head_dim", -1)) != D:
        raise ConversionError(f"{source}: head_dim {meta.get('head_dim')} but the model's is {D}")
    if str(meta.get("rope_style", "half")) != "half":
        raise ConversionError(f"{source}: rope_style {meta.get('rope_style')!r}; kvdice's bands are rotate-half ('half')")
    for field, want in (("num_layers", L), ("num_kv_heads", shape["n_kv_heads"])):
        if field in meta and int(meta[field]) != want:
            raise ConversionError(f"{source}: {field} {meta[field]} but the model has {want}")
    if shape["partial_rotary_factor"] != 1.0:
        raise ConversionError("TriAttention needs RoPE over the whole head; this model rotates part of it")
    bands = D // 2
    missing = [f"layer{l:02d}_head{h:02d}" for l in range(L) for h in range(H) if f"layer{l:02d}_head{h:02d}" not in stats]
    if missing:
        raise ConversionError(
            f"{source}: no statistics for {len(missing)} of {L * H} (layer, head) pairs, e.g. {missing[0]}; "
            "kvdice's triattention scores every head of every layer (calibrate with all heads sampled)")
    cells = np.zeros((3, L, H, bands), dtype=np.float64)
    for l in range(L):
        for h in range(H):
            key = f"layer{l:02d}_head{h:02d}"
            entry = stats[key]
            for i, field in enumerate(("q_mean_real", "q_mean_imag", "q_abs_mean")):
                if field not in entry:
                    raise ConversionError(f"{source}: stats[{key!r}] has no {field!r}")
                cells[i, l, h] = _vector(entry[field], key, field, bands)
            if np.any(np.hypot(cells[0, l, h], cells[1, l, h]) > cells[2, l, h] * (1 + 1e-5) + 1e-30):
                raise ConversionError(f"{source}: stats[{key!r}] has |E q| > E|q| in some band: not a mean and a "
                                      "mean magnitude of the same queries")
    computed = 1.0 / shape["rope_theta"] ** (np.arange(bands, dtype=np.float64) * 2.0 / D)
    if "omega" in meta:
        omega = _vector(meta["omega"], "metadata", "omega", bands)
    elif shape["rope_type"] == "default":
        omega = computed
    else:
        raise ConversionError(f"{source}: the model's RoPE is {shape['rope_type']!r} and the file carries no omega")
    freq_scale = _vector(meta["freq_scale"], "metadata", "freq_scale", bands) if "freq_scale" in meta else np.ones(bands)
    validity = float(np.mean(np.max(np.hypot(cells[0], cells[1]) / np.maximum(cells[2], 1e-30), axis=2)))
    tensors = {"q_mean_real": cells[0], "q_mean_imag": cells[1], "q_abs_mean": cells[2], "omega": omega,
               "freq_scale": freq_scale, "q_weight_norm": np.asarray(norms, dtype=np.float64)}
    tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}
    metadata = {"format": FORMAT, "version": "1", "architecture": shape["architecture"],
                "model": str(meta.get("model_name", meta.get("model", "?"))), "n_layers": str(L),
                "n_heads": str(H), "n_kv_heads": str(shape["n_kv_heads"]), "head_dim": str(D),
                "rope_theta": repr(shape["rope_theta"]), "text": f"converted from {source}",
                "text_sha256": "", "tokens": str(meta.get("num_tokens", meta.get("tokens", 0))),
                "validity": f"{validity:.6f}", "converted_from": "triattention official statistics"}
    return tensors, metadata


def write_safetensors(path: Path, tensors: dict, metadata: dict) -> None:
    header = {"__metadata__": metadata}
    offset = 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format's 8-byte alignment of the data
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for a in tensors.values():
            f.write(a.astype("<f4").tobytes())
    tmp.replace(path)  # a failed run never leaves half a file under the name


def read_safetensors(path: Path) -> tuple[dict, dict]:
    """Tensors (float32) and metadata of a safetensors file (used by the tests to compare files)."""
    header, data_start = _safetensors_header(path)
    meta = header.pop("__metadata__", {})
    return {name: _read_tensor(path, name, entry, data_start) for name, entry in header.items()}, meta


def load_official(path: Path) -> dict:
    try:
        import torch
    except ImportError:
        raise ConversionError("reading the official .pt file needs torch (pip install torch)") from None
    if not path.is_file():
        raise ConversionError(f"{path}: no such file")
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for a file that is not a checkpoint
        raise ConversionError(f"{path}: cannot be read as a torch.save file of tensors ({e})") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--official", required=True, type=Path, help="the official implementation's statistics (.pt)")
    ap.add_argument("--model", required=True, type=Path, help="the model's HF checkpoint directory")
    ap.add_argument("--out", required=True, type=Path, help="kvdice statistics file to write (safetensors)")
    args = ap.parse_args(argv)
    try:
        shape = model_shape(args.model)
        payload = load_official(args.official)
        norms = q_weight_norms(args.model, shape["n_layers"], shape["n_heads"] * shape["head_dim"])
        tensors, metadata = convert(payload, shape, norms, str(args.official))
        write_safetensors(args.out, tensors, metadata)
    except ConversionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{args.out}: {shape['n_layers']} layers x {shape['n_heads']} heads x {shape['head_dim'] // 2} bands, "
          f"validity {metadata['validity']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
