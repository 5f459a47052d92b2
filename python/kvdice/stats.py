"""Statistics over graded cells (``kvdice stats``): accuracy per cell and paired comparisons with a
baseline cell (problem-clustered bootstrap CI of the difference, exact sign test)."""

from __future__ import annotations

import os
from typing import Optional, Sequence

from . import _kvdice


def _cells(cells) -> list:
    if cells is None:
        return []
    return [cells] if isinstance(cells, str) else list(cells)


def compute(
    results: str,
    cells: Optional[Sequence[str]] = None,
    *,
    baseline: str = "",
    baseline_policy: str = "full",
    resamples: int = 10000,
    seed: int = 20240917,
) -> list:
    """One dict per cell: cell, model, task, policy, budget, problems, runs, accuracy, acc_strict,
    mean_generated, mean_rounds; correct (correct answers), wall_seconds (its runs' wall time split by
    the tokens each cell generated in them), device_seconds, device_hour_kind ("GPU", "CPU" or
    "mixed") and correct_per_device_hour (per GPU-hour, or per CPU device-hour), None for cells with
    records written before the runs table; lm_eval_exact_match (lm-evaluation-harness's exact_match,
    math cells graded with it, else None); and, against its baseline, difference, ci_low, ci_high,
    significant and the sign test's counts and p-value. pandas.DataFrame(compute(...)) is the table."""
    return _kvdice.stats_rows(os.fspath(results), _cells(cells), baseline, baseline_policy, resamples, seed)


def table(
    results: str,
    cells: Optional[Sequence[str]] = None,
    *,
    format: str = "markdown",
    baseline: str = "",
    baseline_policy: str = "full",
    resamples: int = 10000,
    seed: int = 20240917,
) -> str:
    """The table ``kvdice stats --format`` prints: markdown, csv or latex."""
    return _kvdice.stats_table(os.fspath(results), _cells(cells), baseline, baseline_policy, resamples, seed, format)
