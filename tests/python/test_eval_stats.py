"""kvdice.eval and kvdice.stats on the tiny fixture: the same database and numbers as the command line."""
import csv
import io
import os
import signal
import sqlite3
import subprocess
import threading

import pytest

import kvdice
from conftest import BINARY, FIXTURES, QWEN3

ARITHMETIC = str(FIXTURES / "eval" / "arithmetic.jsonl")
SMALL = dict(model=QWEN3, task="math500", dataset=ARITHMETIC, limit=3, runs=2, max_new_tokens=8, backend="cpu",
             threads=1)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("results"))
    full = kvdice.eval.run(root, policy="full", cell="full", **SMALL)
    assert full == dict(full, cell="full", total=6, skipped=0, completed=6)
    kvdice.eval.run(root, policy="random_pp", budget=192, window=16, cell="rpp", **SMALL)
    kvdice.eval.grade(root)
    return root


def test_records_are_the_command_lines(results):
    rows = kvdice.eval.records(results, "rpp")
    assert sorted((r["problem"], r["run"]) for r in rows) == [(p, r) for p in range(3) for r in range(2)]
    assert all(r["generated_tokens"] <= 8 and r["grader"] == "math" and r["score"] in (0.0, 1.0) for r in rows)
    assert [c["records"] for c in kvdice.eval.check(results)] == [6, 6]
    cli = subprocess.run([BINARY, "eval", "check", "--results", results], capture_output=True, text=True, check=True)
    assert "cell rpp: ok, 6/6 records" in cli.stdout


def test_stats_match_kvdice_stats(results):
    # The tiny model answers nothing right; scores are set by hand (the grades table as `eval grade`
    # writes it) so the comparison has a difference and an interval to agree on.
    with sqlite3.connect(os.path.join(results, "results.sqlite")) as db:
        db.execute("UPDATE grades SET score = 1 WHERE cell = 'rpp' AND (problem, run) IN ((0, 0), (0, 1), (1, 0))")
    rows = {r["cell"]: r for r in kvdice.stats.compute(results, resamples=200)}
    assert rows["rpp"]["baseline"] == "full" and rows["rpp"]["budget"] == 192 and rows["full"]["budget"] == 0
    assert rows["rpp"]["accuracy"] == 0.5 and rows["rpp"]["difference"] == 0.5
    table = kvdice.stats.table(results, format="csv", resamples=200)
    cli = subprocess.run([BINARY, "stats", "--results", results, "--format", "csv", "--resamples", "200"],
                         capture_output=True, text=True, check=True)
    assert table == cli.stdout
    line = next(r for r in csv.DictReader(io.StringIO(cli.stdout)) if r["cell"] == "rpp")
    rpp = rows["rpp"]
    assert (float(line["diff"]), float(line["ci_low"]), float(line["ci_high"])) == pytest.approx(
        (rpp["difference"], rpp["ci_low"], rpp["ci_high"]), abs=1e-6)
    assert rpp["ci_low"] < rpp["ci_high"]
    assert (int(line["sign_positive"]), int(line["sign_negative"])) == (rpp["sign_positive"], rpp["sign_negative"])
    # What each cell cost: its run's wall time (one run per cell here), CPU device-hours.
    with sqlite3.connect(os.path.join(results, "results.sqlite")) as db:
        wall = dict(db.execute("SELECT c.cell, r.wall_seconds FROM runs r JOIN run_cells c USING (run_id)"))
    assert rpp["wall_seconds"] == pytest.approx(wall["rpp"]) and rpp["device_hour_kind"] == "CPU"
    assert rpp["correct"] == 3 and rpp["correct_per_device_hour"] == pytest.approx(3 * 3600 / wall["rpp"])
    assert float(line["wall_seconds"]) == pytest.approx(wall["rpp"], abs=1e-3)
    assert rpp["lm_eval_exact_match"] == pytest.approx(float(line["lm_eval_exact_match"]))
    assert all(r["exact_match"] in (0.0, 1.0) for r in kvdice.eval.records(results, "rpp"))


def test_ctrl_c_stops_a_run_and_the_next_run_resumes(tmp_path):
    root = str(tmp_path)
    big = dict(SMALL, limit=16, runs=3, max_new_tokens=128)
    timer = threading.Timer(0.4, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        kvdice.eval.run(root, policy="full", cell="c", **big)
    timer.join()
    kept = len(kvdice.eval.records(root))
    assert kept < 48
    again = kvdice.eval.run(root, policy="full", cell="c", **big)
    assert again["skipped"] == kept and again["completed"] == 48 - kept


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda root: kvdice.eval.run(root, **dict(SMALL, task="mathh")), "mathh"),
        (lambda root: kvdice.eval.run(root, **dict(SMALL, dataset="no_such.jsonl")), "no_such.jsonl"),
        (lambda root: kvdice.eval.check(root + "/absent"), "absent"),
        (lambda root: kvdice.eval.grade(root + "/absent"), "absent"),
        (lambda root: kvdice.eval.records(root + "/absent"), "absent"),
        (lambda root: kvdice.stats.compute(root + "/absent"), "absent"),
        (lambda root: kvdice.stats.table(root, format="html"), "html"),
        (lambda root: kvdice.stats.compute(root, resamples=0), "resamples"),
    ],
)
def test_bad_input(results, call, message):
    with pytest.raises(kvdice.Error, match=message):
        call(results)


def test_an_unknown_cell(results):
    with pytest.raises(kvdice.Error, match="nocell"):
        kvdice.eval.records(results, "nocell")
