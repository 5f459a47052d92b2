#!/usr/bin/env python3
"""Goldens for src/stats: paired bootstrap CIs and exact sign tests computed with numpy and scipy.

For each committed example (per-problem mean scores of two cells), it writes:
  * the bootstrap CI with kvdice's exact resampling scheme (mt19937_64 seeded with `seed`; index =
    (draw * n) >> 64), the means and percentiles computed by numpy (linear interpolation): kvdice
    must match to 1e-12;
  * scipy.stats.bootstrap's percentile CI over the same differences (its own RNG): kvdice must
    agree within Monte Carlo error;
  * scipy.stats.binomtest's two-sided p-value of the sign test: kvdice must match to 1e-9.

    /usr/bin/python3 tools/make_stats_goldens.py     # writes tests/fixtures/eval/stats_goldens.json

Made with numpy and scipy from Debian 12 (python3-numpy 1.24, python3-scipy 1.10).
"""
import json
from pathlib import Path

import numpy as np
import scipy
from scipy import stats

MASK64 = (1 << 64) - 1


class MT19937_64:
    """std::mt19937_64, as the C++ standard specifies it."""

    def __init__(self, seed: int):
        self.mt = [0] * 312
        self.mt[0] = seed & MASK64
        for i in range(1, 312):
            self.mt[i] = (6364136223846793005 * (self.mt[i - 1] ^ (self.mt[i - 1] >> 62)) + i) & MASK64
        self.index = 312

    def __call__(self) -> int:
        if self.index >= 312:
            for i in range(312):
                x = (self.mt[i] & 0xFFFFFFFF80000000) | (self.mt[(i + 1) % 312] & 0x7FFFFFFF)
                xa = x >> 1
                if x & 1:
                    xa ^= 0xB5026F5AA96619E9
                self.mt[i] = self.mt[(i + 156) % 312] ^ xa
            self.index = 0
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK64


def kvdice_resample_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    rng = MT19937_64(seed)
    n = len(values)
    idx = np.array([[(rng() * n) >> 64 for _ in range(n)] for _ in range(resamples)])
    return values[idx].mean(axis=1)


def example(name: str, a: np.ndarray, b: np.ndarray, resamples: int, seed: int) -> dict:
    d = a - b
    means = kvdice_resample_means(d, resamples, seed)
    low, high = np.percentile(means, [2.5, 97.5])
    scipy_ci = stats.bootstrap((d,), np.mean, n_resamples=resamples, confidence_level=0.95, method="percentile",
                               random_state=np.random.default_rng(seed)).confidence_interval
    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    p = stats.binomtest(pos, pos + neg, 0.5, alternative="two-sided").pvalue if pos + neg > 0 else 1.0
    return {"name": name, "a": a.tolist(), "b": b.tolist(), "resamples": resamples, "seed": seed,
            "mean": float(d.mean()), "first_resample_means": means[:5].tolist(),
            "ci_low": float(low), "ci_high": float(high),
            "scipy_ci_low": float(scipy_ci.low), "scipy_ci_high": float(scipy_ci.high),
            "sign_positive": pos, "sign_negative": neg, "sign_p": float(p)}


def main() -> None:
    rng = np.random.default_rng(11)
    cases = []
    # 1) a clear win: 60 problems, 4 runs each, B drops ~15 points.
    a = rng.binomial(4, 0.8, 60) / 4
    b = np.clip(a - rng.binomial(4, 0.15, 60) / 4, 0, 1)
    cases.append(example("clear_win", a, b, 10000, 20240917))
    # 2) no difference: identical skill, noise only (MATH-500-like, 2 runs).
    a = rng.binomial(2, 0.6, 80) / 2
    b = rng.binomial(2, 0.6, 80) / 2
    cases.append(example("noise", a, b, 10000, 20240917))
    # 3) small sample with ties and one loss (AIME-like, 16 runs, 30 problems).
    a = rng.binomial(16, 0.5, 30) / 16
    b = a.copy()
    b[:7] = np.clip(b[:7] + 1 / 16, 0, 1)
    b[7] = max(b[7] - 2 / 16, 0)
    cases.append(example("ties_small", a, b, 2000, 7))
    out = Path(__file__).resolve().parent.parent / "tests/fixtures/eval/stats_goldens.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"versions": {"numpy": np.__version__, "scipy": scipy.__version__},
                               "cases": cases}, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
