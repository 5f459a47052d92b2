#!/usr/bin/env python3
"""Adds "lm_eval_em" to each pair of tests/fixtures/eval/math_verify_pairs.jsonl: lm-evaluation-harness's
exact_match for MATH (lm_eval/tasks/hendrycks_math/utils.py, lm_eval 0.4.13, pip install
lm_eval==0.4.13): is_equiv(answer, gold), the answer being what remove_boxed(last_boxed_only_string(.))
reads from the completion, or, where that finds nothing or its assert refuses the box, the text between
the completion's first and last "$" (its process_results), else the whole completion.
The module is loaded from its file, so lm_eval's task registry and its dependencies are not needed:

    python3 tests/eval/add_lm_eval_verdicts.py SITE_PACKAGES/lm_eval/tasks/hendrycks_math/utils.py \
        < tests/fixtures/eval/math_verify_pairs.jsonl > pairs.jsonl
"""
import importlib.util
import json
import sys
import types


def load(path):
    sys.modules.setdefault("datasets", types.SimpleNamespace(Dataset=object))  # only a type annotation
    spec = importlib.util.spec_from_file_location("hendrycks_math_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def answer(utils, completion):
    boxed = utils.last_boxed_only_string(completion)
    if boxed is not None:
        try:
            return utils.remove_boxed(boxed)
        except AssertionError:
            pass
    dollars = [i for i, c in enumerate(completion) if c == "$"]
    return completion if len(dollars) <= 1 else completion[dollars[0] + 1 : dollars[-1]]


def main():
    utils = load(sys.argv[1])
    for line in sys.stdin:
        pair = json.loads(line)
        pair["lm_eval_em"] = bool(utils.is_equiv(answer(utils, pair["completion"]), pair["gold"]))
        sys.stdout.write(json.dumps(pair, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
