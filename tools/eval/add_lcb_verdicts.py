#!/usr/bin/env python3
"""Adds "lcb" to each case of tests/fixtures/eval/code_cases.jsonl: whether LiveCodeBench's runner
passes the completion. The runner is lcb_runner/evaluation/testing_util.py and
compute_code_generation_metrics.py as the Random Attention harness ships them (VaSE's
eval/reasoning_tasks/Utils/livecodebench_utils, github.com/terarachang/VaSE commit bfa2692, copied from
LiveCodeBench): check_correctness(sample, code, timeout=1), a pass being every test's result True.
The code is what LiveCodeBench's extract_code returns for a chat model: the lines between the last two
lines containing a ``` fence. Run from that checkout's eval/reasoning_tasks/ folder with numpy installed:

    cd VaSE/eval/reasoning_tasks && python3 KVDICE/tools/eval/add_lcb_verdicts.py OUT.jsonl < cases.jsonl

(The result goes to OUT.jsonl: the programs under test print to standard output.)
"""
import json
import os
import sys

sys.path.insert(0, os.getcwd())  # the VaSE checkout's eval/reasoning_tasks/

from Utils.livecodebench_utils.compute_code_generation_metrics import check_correctness


def extract_code(completion):
    lines = completion.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return ""
    return "\n".join(lines[fences[-2] + 1 : fences[-1]])


def main():
    cases = [json.loads(line) for line in sys.stdin]  # read first: the runner's children share stdin
    out = open(sys.argv[1], "w")
    for case in cases:
        problem = case["problem"]
        sample = {"input_output": json.dumps({
            "inputs": [t["input"] for t in problem["tests"]],
            "outputs": [t["output"] for t in problem["tests"]],
            "fn_name": problem.get("fn_name"),
        })}
        try:
            results, _ = check_correctness(sample, extract_code(case["completion"]), timeout=1, debug=False)
            case["lcb"] = bool(results) and all(r is True for r in results)
        except Exception:
            case["lcb"] = False
        out.write(json.dumps(case, ensure_ascii=False) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
