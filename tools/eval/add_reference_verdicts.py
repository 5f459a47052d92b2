#!/usr/bin/env python3
"""Adds "reference" to each pair of tests/fixtures/eval/math_verify_pairs.jsonl: the verdict of the
math grader the Random Attention paper's harness uses, VaSE's eval/reasoning_tasks/Utils
(github.com/terarachang/VaSE, commit bfa2692; the paper's release copies it unmodified): the answer is
parser.extract_answer(completion) (the text after the last "boxed": a brace-matched group, or up to the
next "$"), then grader.check_is_correct(answer, gold) = math_equal(strip_string(answer),
strip_string(gold)) with its 3-second symbolic subprocess; an exception is a wrong answer, as in the
harness. Run from that checkout's eval/reasoning_tasks/ folder in an environment with its
requirements (sympy 1.14.0, latex2sympy2 1.9.1, which pins antlr4-python3-runtime 4.7.2, regex,
word2number):

    python3 -m venv /tmp/ref-venv
    /tmp/ref-venv/bin/pip install sympy==1.14.0 latex2sympy2==1.9.1 regex word2number numpy
    cd VaSE/eval/reasoning_tasks && /tmp/ref-venv/bin/python KVDICE/tools/eval/add_reference_verdicts.py \
        < KVDICE/tests/fixtures/eval/math_verify_pairs.jsonl > pairs.jsonl

With --choice it grades the choice corpus instead (tests/fixtures/eval/choice_pairs.jsonl): the same
extract_answer and check_is_correct against the gold letter, which is how the harness grades GPQA.
"""
import json
import os
import sys

sys.path.insert(0, os.getcwd())  # the VaSE checkout's eval/reasoning_tasks/

from Utils.grader import check_is_correct
from Utils.parser import extract_answer


def verdict(completion, gold):
    try:
        return bool(check_is_correct(extract_answer(completion, "math"), gold))
    except Exception:
        return False


def main():
    choice = "--choice" in sys.argv[1:]
    for line in sys.stdin:
        pair = json.loads(line)
        pair["reference"] = verdict(pair["completion"], pair["gold"])
        if choice:
            pair["reference_answer"] = extract_answer(pair["completion"], "gpqa")
        sys.stdout.write(json.dumps(pair, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
