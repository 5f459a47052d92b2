"""Evaluation cells in the results database that ``kvdice eval`` writes (docs/eval.md).

    kvdice.eval.run("runs/arith", model="tests/fixtures/qwen3", task="math500",
                    dataset="tests/fixtures/eval/arithmetic.jsonl", policy="random_pp", budget=128,
                    window=32, limit=12, max_new_tokens=160)
    kvdice.eval.grade("runs/arith")
    pandas.DataFrame(kvdice.eval.records("runs/arith"))

Every record is committed as it finishes; a Ctrl-C stops the run with KeyboardInterrupt and running
the same cell again resumes it.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

from . import _kvdice
from ._paths import kvdice_home


def _cells(cells) -> list:
    if cells is None:
        return []
    return [cells] if isinstance(cells, str) else list(cells)


def run(
    results: str,
    *,
    model: str,
    task: str,
    dataset: str,
    policy: str = "random_pp",
    budget: Optional[int] = None,
    window: Optional[int] = None,
    runs: Optional[int] = None,
    max_new_tokens: Optional[int] = None,
    max_length: Optional[int] = None,
    temperature: Optional[float] = None,
    top_p: Optional[float] = None,
    limit: int = 0,
    seed: int = 0,
    cell: str = "",
    long_prompt: str = "warn",
    backend: str = "auto",
    threads: int = 0,
    max_batch: int = 64,
) -> dict:
    """Decodes one cell (``kvdice eval run``); unset values take the task's protocol defaults.
    Returns the cell name and counts: total, skipped (already recorded), completed, generated_tokens,
    seconds (decoding), run_id and wall_seconds (this invocation's row in the database's runs table)."""
    return _kvdice.eval_run(
        os.fspath(results), os.fspath(model), kvdice_home(), task, os.fspath(dataset), policy, budget, window, runs,
        max_new_tokens, max_length, temperature, top_p, limit, seed, cell, long_prompt, backend, threads, max_batch,
    )


def check(results: str, cells: Optional[Sequence[str]] = None, *, dataset: Optional[str] = None,
          partial: bool = False) -> list:
    """Integrity checks of every cell (or those named): one dict per cell with records, expected and
    warnings; kvdice.Error naming every problem otherwise."""
    return _kvdice.eval_check(os.fspath(results), _cells(cells), dataset, partial)


def grade(results: str, cells: Optional[Sequence[str]] = None, *, dataset: Optional[str] = None) -> list:
    """Grades every record of the cells (replacing earlier grades): one dict per cell with graded and
    mean_score."""
    return _kvdice.eval_grade(os.fspath(results), _cells(cells), dataset)


def records(results: str, cells: Optional[Sequence[str]] = None) -> list:
    """One flat dict per (cell, problem, run): completion, token counts, finish, eviction rounds, and
    grader, score, extracted answer and exact_match (lm-evaluation-harness's, math only, else None)
    once graded. pandas.DataFrame(records(...)) is the table."""
    return _kvdice.eval_records(os.fspath(results), _cells(cells))
