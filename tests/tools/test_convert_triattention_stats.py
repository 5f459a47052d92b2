"""tools/convert_triattention_stats.py against kvdice itself: statistics `kvdice calibrate` measured on
the Qwen3 fixture, laid out in the official implementation's format, convert back to the same file,
and `kvdice generate` with the converted file keeps what it keeps with the original."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import convert_triattention_stats as conv  # noqa: E402

BINARY = os.environ.get("KVDICE_BINARY", str(ROOT / "build" / "kvdice"))
QWEN3 = ROOT / "tests" / "fixtures" / "qwen3"
PHI3 = ROOT / "tests" / "fixtures" / "phi3"


def kvdice(*args):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    d = tmp_path_factory.mktemp("tri")
    text = d / "calibration.txt"
    text.write_text("".join(f"the cat sat on the mat and counted to {i}. " for i in range(200)))
    stats = d / "q3.tri"
    r = kvdice("calibrate", "--model", str(QWEN3), "--text", str(text), "--out", str(stats), "--tokens", "600",
               "--segment", "256")
    assert r.returncode == 0, r.stderr
    return stats


def official_payload(tensors, n_kv_heads):
    """kvdice's statistics in the official layout: one entry per (layer, query head)."""
    L, H, _ = tensors["q_mean_real"].shape
    stats = {f"layer{l:02d}_head{h:02d}": {f: tensors[f][l, h].copy() for f in ("q_mean_real", "q_mean_imag", "q_abs_mean")}
             for l in range(L) for h in range(H)}
    meta = {"head_dim": 2 * tensors["q_mean_real"].shape[2], "rope_style": "half", "num_layers": L,
            "num_kv_heads": n_kv_heads, "sampled_heads": [[l, h] for l in range(L) for h in range(H)]}
    return {"metadata": meta, "stats": stats}


def convert_fixture(payload, out):
    shape = conv.model_shape(QWEN3)
    norms = conv.q_weight_norms(QWEN3, shape["n_layers"], shape["n_heads"] * shape["head_dim"])
    tensors, meta = conv.convert(payload, shape, norms, "official.pt")
    conv.write_safetensors(out, tensors, meta)


def generate(stats):
    r = kvdice("generate", "--model", str(QWEN3), "-p", "Count to ten.", "--policy", f"triattention:stats={stats}",
               "--budget", "32", "--window", "8", "-n", "80", "--ignore-eos", "--json", "--seed", "3",
               "--backend", "cpu")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_official_layout_converts_back_to_the_calibrated_file(calibrated, tmp_path):
    original, _ = conv.read_safetensors(calibrated)
    out = tmp_path / "converted.tri"
    convert_fixture(official_payload(original, 2), out)
    converted, meta = conv.read_safetensors(out)
    assert meta["format"] == "kvdice-triattention-stats"
    for name in ("q_mean_real", "q_mean_imag", "q_abs_mean", "freq_scale"):
        np.testing.assert_array_equal(converted[name], original[name], err_msg=name)
    # Computed here in double from config.json and the weights, by kvdice in its own order.
    np.testing.assert_allclose(converted["omega"], original["omega"], rtol=1e-6)
    np.testing.assert_allclose(converted["q_weight_norm"], original["q_weight_norm"], rtol=1e-6)
    a, b = generate(calibrated), generate(out)
    assert a["generated_ids"] == b["generated_ids"]
    assert a["stats"]["eviction_rounds"] == b["stats"]["eviction_rounds"] > 1


def test_the_fused_qkv_projection_gives_the_q_rows_norm():
    shape = conv.model_shape(PHI3)
    q_rows = shape["n_heads"] * shape["head_dim"]
    header, start = conv._safetensors_header(PHI3 / "model.safetensors")
    w = conv._read_tensor(PHI3 / "model.safetensors", "", header["model.layers.0.self_attn.qkv_proj.weight"], start)
    norms = conv.q_weight_norms(PHI3, shape["n_layers"], q_rows)
    assert norms[0] == pytest.approx(float(np.linalg.norm(w[:q_rows].astype(np.float64))), rel=1e-12)
    assert norms[0] < float(np.linalg.norm(w.astype(np.float64)))


@pytest.mark.parametrize("damage, message", [
    (lambda p: p["stats"].pop("layer01_head03"), "layer01_head03"),
    (lambda p: p["metadata"].update(head_dim=64), "head_dim 64"),
    (lambda p: p["metadata"].update(rope_style="interleaved"), "rope_style"),
    (lambda p: p["metadata"].update(num_kv_heads=4), "num_kv_heads 4"),
    (lambda p: p["stats"]["layer00_head01"].update(q_abs_mean=np.zeros(16)), "|E q| > E|q|"),
    (lambda p: p["stats"]["layer00_head00"].update(q_mean_real=np.full(16, np.nan)), "non-finite"),
    (lambda p: p["stats"]["layer00_head00"].pop("q_mean_imag"), "q_mean_imag"),
    (lambda p: p["stats"]["layer00_head00"].update(q_mean_real=np.zeros(8)), "8 values"),
])
def test_bad_statistics_are_named(calibrated, tmp_path, damage, message):
    payload = official_payload(conv.read_safetensors(calibrated)[0], 2)
    damage(payload)
    out = tmp_path / "bad.tri"
    with pytest.raises(conv.ConversionError, match=None) as e:
        convert_fixture(payload, out)
    assert message in str(e.value)
    assert not out.exists()


def test_the_command_line_refuses_missing_inputs_clearly(tmp_path):
    tool = [sys.executable, str(ROOT / "tools" / "convert_triattention_stats.py")]
    r = subprocess.run(tool + ["--official", str(tmp_path / "none.pt"), "--model", str(QWEN3), "--out",
                               str(tmp_path / "x.tri")], capture_output=True, text=True)
    assert r.returncode == 1 and "error:" in r.stderr and ("none.pt" in r.stderr or "needs torch" in r.stderr)
    r = subprocess.run(tool + ["--official", str(tmp_path / "none.pt"), "--model", str(tmp_path), "--out",
                               str(tmp_path / "x.tri")], capture_output=True, text=True)
    assert r.returncode == 1 and "no config.json" in r.stderr


def test_a_torch_file_converts_end_to_end(calibrated, tmp_path):
    torch = pytest.importorskip("torch")  # the GPU machine has it; CI covers convert() above
    original, _ = conv.read_safetensors(calibrated)
    payload = official_payload(original, 2)
    for entry in payload["stats"].values():
        for k in entry:
            entry[k] = torch.from_numpy(entry[k])
    torch.save(payload, tmp_path / "official.pt")
    out = tmp_path / "converted.tri"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "convert_triattention_stats.py"), "--official",
                        str(tmp_path / "official.pt"), "--model", str(QWEN3), "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(conv.read_safetensors(out)[0]["q_mean_imag"], original["q_mean_imag"])
    assert generate(out)["generated_ids"] == generate(calibrated)["generated_ids"]
