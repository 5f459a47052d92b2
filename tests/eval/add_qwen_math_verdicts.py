#!/usr/bin/env python3
"""Adds "qwen_math" to each pair of tests/fixtures/eval/math_verify_pairs.jsonl: the verdict of the
Qwen2.5-Math evaluation grader (QwenLM/Qwen2.5-Math, evaluation/grader.py math_equal with parser.py's
extract_answer and strip_string), the grader family the reference harness's math_equal comes from.
Run from a checkout of that repository's evaluation/ folder with its pinned requirements
(sympy==1.12, antlr4-python3-runtime==4.11.1, its latex2sympy installed with pip install -e):

    cd Qwen2.5-Math/evaluation && python3 KVDICE/tests/eval/add_qwen_math_verdicts.py \
        < KVDICE/tests/fixtures/eval/math_verify_pairs.jsonl > pairs.jsonl
"""
import json
import sys

from grader import math_equal
from parser import extract_answer, strip_string


def main():
    for line in sys.stdin:
        pair = json.loads(line)
        pred = extract_answer(pair["completion"], "math")
        gold = strip_string(pair["gold"])
        pair["qwen_math"] = bool(math_equal(pred, gold, timeout=True))
        sys.stdout.write(json.dumps(pair, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
