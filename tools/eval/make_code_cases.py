#!/usr/bin/env python3
"""Writes the code grader's case corpus, tests/fixtures/eval/code_cases.jsonl: one completion a line
with its problem (LiveCodeBench shape: "tests" [{input, output}] and, for functional problems,
"fn_name"), the verdict that is right ("expected": all tests pass) and, where LiveCodeBench's runner
decides otherwise, why. LiveCodeBench's verdict ("lcb") is added by running its runner
(tools/eval/add_lcb_verdicts.py); tests/eval/test_code_cases.cpp requires kvdice's verdict to be the
expected one on every case. Standard library only:

    python3 tools/eval/make_code_cases.py > /tmp/cases.jsonl
    (cd VaSE/eval/reasoning_tasks && python3 KVDICE/tools/eval/add_lcb_verdicts.py \\
        KVDICE/tests/fixtures/eval/code_cases.jsonl) < /tmp/cases.jsonl
"""
import json
import sys


def fence(code, tag="python"):
    return "Here is the solution.\n```" + tag + "\n" + code.strip("\n") + "\n```\n"


def stdin(*pairs):
    return {"tests": [{"input": i, "output": o} for i, o in pairs]}


def functional(fn_name, *pairs):
    return {"fn_name": fn_name, "tests": [{"input": i, "output": o} for i, o in pairs]}


SUM = "a, b = map(int, input().split())\nprint(a + b)"
SUM_PROBLEM = stdin(("1 2\n", "3\n"), ("10 20\n", "30\n"))
TWO_SUM = """
class Solution:
    def twoSum(self, nums, target):
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return [seen[target - x], i]
            seen[x] = i
"""
TWO_SUM_PROBLEM = functional("twoSum", ("[2,7,11,15]\n9", "[0, 1]"), ("[3,2,4]\n6", "[1, 2]"))

# Why kvdice's verdict differs from LiveCodeBench's runner (docs/eval.md lists them).
REASONS = {
    "float-tolerance": "The answer is a float within 1e-6 of the expected one; problems with real-valued output accept that error, as the reference harness does. LiveCodeBench compares the decimal strings exactly.",
    "token-spacing": "The same tokens separated by other whitespace; judges compare output token by token. LiveCodeBench compares non-numeric lines character by character.",
    "nonzero-exit": "The program prints the right answer and then exits with status 1: a runtime error on any judge. LiveCodeBench runs the code in-process and swallows SystemExit.",
    "bool-int": "The function returns 1 where the answer is true: a different JSON value. LiveCodeBench compares with Python's ==, where True == 1.",
    "unclosed-block": "A completion cut by the length limit ends inside its last code block; that block is the program. LiveCodeBench takes the text between the last two fence lines, here the prose between the two blocks.",
    "float-functional": "A float result within 1e-6 of the expected one; LiveCodeBench compares functional results with == (no tolerance).",
    "open-stdin": "open(0) is standard input in python3, a common fast-input idiom; LiveCodeBench runs the program in-process with open() replaced by a mock.",
    "stdin-imports": "A stdin program that uses deque without importing it raises NameError under python3, as on any judge; LiveCodeBench runs every program after star-imports of some twenty standard modules.",
    "tagged-other": "The last fenced block is C++, not Python; kvdice runs only python, py, python3 or untagged blocks, LiveCodeBench runs the last block whatever its tag (and it fails to compile as Python).",
}

# (name, class, completion, problem, expected, reason or None)
CASES = [
    ("stdin sum", "stdin", fence(SUM), SUM_PROBLEM, True, None),
    ("stdin sum wrong", "wrong-output", fence("a, b = map(int, input().split())\nprint(a - b)"), SUM_PROBLEM, False, None),
    ("stdin second test wrong", "wrong-output", fence("a, b = map(int, input().split())\nprint(3)"), SUM_PROBLEM, False, None),
    ("stdin trailing spaces", "whitespace", fence("a, b = map(int, input().split())\nprint(str(a + b) + '   ')"), SUM_PROBLEM, True, None),
    ("stdin trailing blank lines", "whitespace", fence("a, b = map(int, input().split())\nprint(a + b)\nprint()\nprint()"), SUM_PROBLEM, True, None),
    ("stdin leading blank line", "whitespace", fence("a, b = map(int, input().split())\nprint()\nprint(a + b)"), SUM_PROBLEM, True, None),
    ("stdin leading spaces", "whitespace", fence("a, b = map(int, input().split())\nprint('  ' + str(a + b))"), SUM_PROBLEM, True, None),
    ("stdin blank line inside", "whitespace", fence("n = int(input())\nprint(1)\nprint()\nprint(n)"), stdin(("2\n", "1\n2\n")), False, None),
    ("stdin CRLF", "whitespace", fence("import sys\na, b = map(int, input().split())\nsys.stdout.write(str(a + b) + '\\r\\n')"), SUM_PROBLEM, True, None),
    ("stdin tab separated numbers", "whitespace", fence("a, b = map(int, input().split())\nprint(a, b, sep='\\t')"), stdin(("1 2\n", "1 2\n")), True, None),
    ("stdin double space numbers", "whitespace", fence("a, b = map(int, input().split())\nprint(a, ' ', b)"), stdin(("1 2\n", "1 2\n")), True, None),
    ("stdin double space words", "whitespace", fence("print('Yes  No')"), stdin(("\n", "Yes No\n")), True, "token-spacing"),
    ("stdin case differs", "wrong-output", fence("print('yes')"), stdin(("\n", "Yes\n")), False, None),
    ("stdin float exact", "float", fence("print(1/4)"), stdin(("\n", "0.25\n")), True, None),
    ("stdin float within 1e-6", "float", fence("print('%.9f' % (1/3))"), stdin(("\n", "0.3333333\n")), True, "float-tolerance"),
    ("stdin float off by 1e-3", "float", fence("print(0.334)"), stdin(("\n", "0.333\n")), False, None),
    ("stdin float trailing zeros", "float", fence("print('2.500')"), stdin(("\n", "2.5\n")), True, None),
    ("stdin big integers differ by one", "float", fence("print(50000000000000001)"), stdin(("\n", "50000000000000000\n")), False, None),
    ("stdin big integers equal", "float", fence("print(2**70)"), stdin(("\n", str(2**70) + "\n")), True, None),
    ("stdin integer as float", "float", fence("print('3.0')"), stdin(("\n", "3\n")), True, None),
    ("stdin too few lines", "wrong-output", fence("print(1)"), stdin(("\n", "1\n2\n")), False, None),
    ("stdin too many lines", "wrong-output", fence("print(1)\nprint(2)"), stdin(("\n", "1\n")), False, None),
    ("stdin main guard", "stdin", fence("def main():\n    a, b = map(int, input().split())\n    print(a + b)\n\nif __name__ == '__main__':\n    main()"), SUM_PROBLEM, True, None),
    ("stdin read all", "stdin", fence("import sys\ndata = sys.stdin.read().split()\nprint(int(data[0]) + int(data[1]))"), SUM_PROBLEM, True, None),
    ("stdin readline", "stdin", fence("import sys\na, b = map(int, sys.stdin.readline().split())\nprint(a + b)"), SUM_PROBLEM, True, None),
    ("stdin open(0)", "stdin", fence("a, b = map(int, open(0).read().split())\nprint(a + b)"), SUM_PROBLEM, True, "open-stdin"),
    ("stdin sys.exit(0) after output", "exit", fence("import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(0)"), SUM_PROBLEM, True, None),
    ("stdin exit(1) after output", "exit", fence("import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(1)"), SUM_PROBLEM, False, "nonzero-exit"),
    ("stdin crash", "crash", fence("a, b = map(int, input().split())\nprint(a + b)\nraise ValueError('boom')"), SUM_PROBLEM, False, None),
    ("stdin crash before output", "crash", fence("print(1 // 0)"), SUM_PROBLEM, False, None),
    ("stdin reads past input", "crash", fence("a = input()\nb = input()\nprint(a, b)"), stdin(("1\n", "1\n")), False, None),
    ("stdin syntax error", "crash", fence("def f(:\n    pass"), SUM_PROBLEM, False, None),
    ("stdin recursion error", "crash", fence("def f(n):\n    return f(n + 1)\nf(0)"), SUM_PROBLEM, False, None),
    ("stdin infinite loop", "timeout", fence("while True:\n    pass"), SUM_PROBLEM, False, None),
    ("stdin sleeps past limit", "timeout", fence("import time\ntime.sleep(30)\nprint(3)"), SUM_PROBLEM, False, None),
    ("stdin no output", "wrong-output", fence("pass"), SUM_PROBLEM, False, None),
    ("stdin two blocks, last right", "extraction", "First try:\n```python\nprint(0)\n```\nBetter:\n" + fence(SUM), SUM_PROBLEM, True, None),
    ("stdin two blocks, last wrong", "extraction", fence(SUM) + "Or shorter:\n```python\nprint(0)\n```\n", SUM_PROBLEM, False, None),
    ("stdin py tag", "extraction", fence(SUM, "py"), SUM_PROBLEM, True, None),
    ("stdin untagged fence", "extraction", fence(SUM, ""), SUM_PROBLEM, True, None),
    ("stdin no code block", "extraction", "The answer is to add the two numbers.", SUM_PROBLEM, False, None),
    ("stdin unclosed last block", "extraction", "Draft:\n```python\nprint(0)\n```\nFinal:\n```python\n" + SUM + "\n", SUM_PROBLEM, True, "unclosed-block"),
    ("stdin last block is C++", "extraction", fence(SUM) + "In C++:\n```cpp\nint main() { return 0; }\n```\n", SUM_PROBLEM, True, "tagged-other"),
    ("functional two sum", "functional", fence(TWO_SUM), TWO_SUM_PROBLEM, True, None),
    ("functional wrong answer", "functional", fence(TWO_SUM.replace("[seen[target - x], i]", "[i, seen[target - x]]")), TWO_SUM_PROBLEM, False, None),
    ("functional tuple for list", "functional", fence(TWO_SUM.replace("[seen[target - x], i]", "(seen[target - x], i)")), TWO_SUM_PROBLEM, True, None),
    ("functional plain function", "functional", fence("def add(a, b):\n    return a + b"), functional("add", ("1\n2", "3")), True, None),
    ("functional prints and returns", "functional", fence("class Solution:\n    def add(self, a, b):\n        print('debug', a, b)\n        return a + b"), functional("add", ("1\n2", "3")), True, None),
    ("functional string result", "functional", fence("class Solution:\n    def rev(self, s):\n        return s[::-1]"), functional("rev", ('"abc"', '"cba"')), True, None),
    ("functional bool result", "functional", fence("class Solution:\n    def even(self, n):\n        return n % 2 == 0"), functional("even", ("4", "true"), ("3", "false")), True, None),
    ("functional 1 for true", "functional", fence("class Solution:\n    def even(self, n):\n        return 1 if n % 2 == 0 else 0"), functional("even", ("4", "true"), ("3", "false")), False, "bool-int"),
    ("functional float within 1e-6", "functional", fence("class Solution:\n    def third(self, x):\n        return x / 3 + 1e-9"), functional("third", ("1", "0.3333333333333333")), True, "float-functional"),
    ("functional float off", "functional", fence("class Solution:\n    def third(self, x):\n        return 0.33"), functional("third", ("1", "0.3333333333333333")), False, None),
    ("functional nested list", "functional", fence("class Solution:\n    def grid(self, n):\n        return [[i * n + j for j in range(n)] for i in range(n)]"), functional("grid", ("2", "[[0, 1], [2, 3]]")), True, None),
    ("functional None for null", "functional", fence("class Solution:\n    def nothing(self, x):\n        return None"), functional("nothing", ("1", "null")), True, None),
    ("functional crash", "functional", fence("class Solution:\n    def add(self, a, b):\n        return a + b + c"), functional("add", ("1\n2", "3")), False, None),
    ("functional timeout", "functional", fence("class Solution:\n    def add(self, a, b):\n        while True:\n            pass"), functional("add", ("1\n2", "3")), False, None),
    ("functional wrong method name", "functional", fence("class Solution:\n    def plus(self, a, b):\n        return a + b"), functional("add", ("1\n2", "3")), False, None),
    ("functional List without import", "functional", fence("class Solution:\n    def total(self, nums: List[int]) -> int:\n        return sum(nums)"), functional("total", ("[1,2,3]", "6")), True, None),
    ("functional Counter without import", "functional", fence("class Solution:\n    def most(self, s):\n        return Counter(s).most_common(1)[0][0]"), functional("most", ('"abb"', '"b"')), True, None),
    ("stdin deque without import", "stdin", fence("q = deque([1, 2])\nprint(sum(q))"), stdin(("\n", "3\n")), False, "stdin-imports"),
    ("functional helper method and typing", "functional", fence("from typing import List\n\nclass Solution:\n    def total(self, nums: List[int]) -> int:\n        return self._s(nums)\n\n    def _s(self, nums):\n        return sum(nums)"), functional("total", ("[1,2,3]", "6")), True, None),
]


def main():
    for name, cls, completion, problem, expected, reason in CASES:
        case = {"name": name, "class": cls, "completion": completion, "problem": problem, "expected": expected}
        if reason:
            case["why"] = REASONS[reason]
        sys.stdout.write(json.dumps(case, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
