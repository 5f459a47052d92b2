#!/usr/bin/env python3
"""Writes tests/fixtures/eval/math_verify_pairs.jsonl: (completion, gold, class, math-verify verdict).

The verdict is what Hugging Face's math-verify decides, recorded by running it (pip install
math-verify==0.9.0) the way its README grades a model: gold = parse("$<gold>$"), prediction =
parse(<completion>), verify(gold, prediction) with the default extraction configs, float_rounding 6
and strict=True. kvdice's grader never produces these verdicts; tests/eval/test_math_verify_agreement.cpp
compares it with them. Many pairs follow math-verify's own regression tests (tests/test_all.py);
the rest cover the classes that break graders. Rerun after editing PAIRS:

    python3 tests/eval/make_math_verify_pairs.py > pairs.jsonl

then add the Qwen2.5-Math grader's verdicts with tests/eval/add_qwen_math_verdicts.py (its own
environment) and write the result to tests/fixtures/eval/math_verify_pairs.jsonl.
"""
import json
import sys

import math_verify
from math_verify import parse, verify


def boxed(x):
    return "So the final answer is $\\boxed{" + x + "}$."


# (class, completion, gold)
PAIRS = [
    # --- integers and AIME answers (0-999, written with leading zeros by the contest)
    ("aime", boxed("204"), "204"),
    ("aime", boxed("025"), "25"),
    ("aime", boxed("007"), "7"),
    ("aime", boxed("000"), "0"),
    ("aime", boxed("70"), "70"),
    ("aime", boxed("71"), "70"),
    ("aime", boxed("588"), "588"),
    ("aime", boxed("5880"), "588"),
    ("aime", boxed("-25"), "25"),
    ("aime", boxed("25.0"), "25"),
    ("aime", boxed("2\\,025"), "2025"),
    ("aime", boxed("1{,}000"), "1000"),
    # --- \boxed extraction: nesting, the last box, \fbox, spaces
    ("boxed", "First \\boxed{3}, but correcting: \\boxed{5}.", "5"),
    ("boxed", "First \\boxed{5}, but correcting: \\boxed{3}.", "5"),
    ("boxed", "$\\boxed{\\frac{\\sqrt{3}}{2}}$", "\\frac{\\sqrt{3}}{2}"),
    ("boxed", "$\\boxed{\\frac{1}{\\frac{1}{2}+1}}$", "\\frac{2}{3}"),
    ("boxed", "$\\boxed{{5}}$", "5"),
    ("boxed", "$\\boxed{\\{1,2\\}}$", "\\{1,2\\}"),
    ("boxed", "The answer is $\\fbox{12}$.", "12"),
    ("boxed", "$\\boxed {12}$", "12"),
    ("boxed", "$\\boxed{\\boxed{12}}$", "12"),
    ("boxed", "$\\boxed{x^{2^{3}}}$", "x^8"),
    ("boxed", "$\\boxed{\\sqrt{\\sqrt{16}}}$", "2"),
    ("boxed", "$\\boxed{12}$ and then I rethink: 13", "12"),
    # --- fractions vs decimals
    ("fraction-decimal", boxed("0.5"), "\\frac{1}{2}"),
    ("fraction-decimal", boxed("\\frac{1}{2}"), "0.5"),
    ("fraction-decimal", boxed("0.25"), "\\frac14"),
    ("fraction-decimal", boxed("0.333"), "\\frac{1}{3}"),
    ("fraction-decimal", boxed("0.333333"), "\\frac{1}{3}"),
    ("fraction-decimal", boxed("0.3333333"), "\\frac{1}{3}"),
    ("fraction-decimal", boxed("1.5"), "\\frac{3}{2}"),
    ("fraction-decimal", boxed("2.5"), "\\frac{3}{2}"),
    ("fraction-decimal", boxed(".4"), "0.4"),
    ("fraction-decimal", boxed("0.40"), "\\frac{2}{5}"),
    ("fraction-decimal", boxed("4.666"), "\\frac{14}{3}"),
    ("fraction-decimal", boxed("\\frac{14}{3}"), "\\frac{28}{6}"),
    ("fraction-decimal", boxed("-0.75"), "-\\frac{3}{4}"),
    ("fraction-decimal", boxed("0.75"), "-\\frac{3}{4}"),
    # --- \frac{a}{b} vs a/b and malformed fractions
    ("frac-slash", boxed("10/9"), "\\frac{10}{9}"),
    ("frac-slash", boxed("-10/9"), "-\\frac{10}{9}"),
    ("frac-slash", boxed("\\frac{10}{9}"), "10/9"),
    ("frac-slash", boxed("\\frac13"), "1/3"),
    ("frac-slash", boxed("\\frac3{3}"), "1"),
    ("frac-slash", boxed("\\dfrac{1}{3}"), "1/3"),
    ("frac-slash", boxed("\\tfrac{1}{3}"), "1/3"),
    ("frac-slash", boxed("\\cfrac{1}{3}"), "1/3"),
    ("frac-slash", boxed("(1)/(3)"), "\\frac{1}{3}"),
    ("frac-slash", boxed("1/3"), "\\frac{1}{4}"),
    ("frac-slash", boxed("\\frac{9}{4}\\pi"), "\\frac94\\pi"),
    ("frac-slash", boxed("\\frac{\\pi}{4}"), "\\pi/4"),
    ("frac-slash", boxed("\\frac{a+b}{2}"), "(a+b)/2"),
    ("frac-slash", boxed("\\frac{a+b}{2}"), "a+b/2"),
    # --- units and text
    ("units", boxed("5 \\text{ cm}"), "5"),
    ("units", boxed("5\\text{cm}"), "5"),
    ("units", boxed("125\\textnormal{ miles}"), "125"),
    ("units", boxed("\\frac{1}{3} \\text{meters}"), "\\frac{1}{3}"),
    ("units", boxed("12 \\mbox{ inches}"), "12"),
    ("units", boxed("12\\,\\text{m}^2"), "12"),
    ("units", boxed("6 \\text{ units}^2"), "6"),
    ("units", boxed("\\$18.90"), "18.90"),
    ("units", boxed("18.90\\$"), "18.9"),
    ("units", boxed("30^\\circ"), "30"),
    ("units", boxed("30^{\\circ}"), "30"),
    ("units", boxed("30°"), "30"),
    ("units", boxed("31^\\circ"), "30"),
    ("units", boxed("\\text{5 apples}"), "5"),
    ("units", boxed("7 \\text{ dollars}"), "8"),
    # --- percentages
    ("percent", boxed("28\\%"), "28"),
    ("percent", boxed("28"), "28\\%"),
    ("percent", boxed("28\\%"), "28\\%"),
    ("percent", boxed("0.28"), "28\\%"),
    ("percent", boxed("28\\%"), "0.28"),
    ("percent", boxed("28 percent"), "28\\%"),
    ("percent", boxed("29\\%"), "28\\%"),
    ("percent", boxed("12.5\\%"), "\\frac{1}{8}"),
    ("percent", boxed("50\\%"), "50"),
    # --- intervals and sets
    ("interval", boxed("[0,1)"), "[0,1)"),
    ("interval", boxed("[0,1)"), "[0,9)"),
    ("interval", boxed("[0,9)"), "(0,9)"),
    ("interval", boxed("(-\\infty, 3)"), "(-\\infty,3)"),
    ("interval", boxed("(-\\infty, 3]"), "(-\\infty,3)"),
    ("interval", boxed("(-\\infty,-2)\\cup(3,\\infty)"), "(-\\infty,-2)\\cup(3,\\infty)"),
    ("interval", boxed("(3,\\infty)\\cup(-\\infty,-2)"), "(-\\infty,-2)\\cup(3,\\infty)"),
    ("interval", boxed("\\left[ -2, 5 \\right]"), "[-2,5]"),
    ("interval", boxed("[-2,\\frac{10}{2}]"), "[-2,5]"),
    ("interval", boxed("(1, 2)"), "[1,2]"),
    ("interval", boxed("\\{1,2,3\\}"), "\\{1,2,3\\}"),
    ("interval", boxed("\\{3,2,1\\}"), "\\{1,2,3\\}"),
    ("interval", boxed("\\{1,2\\}"), "\\{1,2,3\\}"),
    ("interval", boxed("x \\in [2, 5]"), "[2,5]"),
    # --- tuples, points, multiple answers
    ("tuple", boxed("(3, \\frac{\\pi}{2})"), "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("tuple", boxed("(3, \\frac{\\pi}{3})"), "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("tuple", boxed("(1,2)"), "(1, 2)"),
    ("tuple", boxed("(2,1)"), "(1,2)"),
    ("tuple", boxed("(1,2,3)"), "(1,2)"),
    ("tuple", boxed("D = (0, 1)"), "(0,1)"),
    ("tuple", boxed("(0.5, 2)"), "(\\frac{1}{2}, 2)"),
    ("multiple", boxed("1, 2, 3"), "1,2,3"),
    ("multiple", boxed("3, 2, 1"), "1,2,3"),
    ("multiple", boxed("1, 2"), "1,2,3"),
    ("multiple", boxed("2, -2"), "-2, 2"),
    ("multiple", boxed("\\pm 2"), "-2, 2"),
    ("multiple", boxed("x=2, x=-2"), "-2, 2"),
    ("multiple", boxed("1 \\text{ and } 2"), "1, 2"),
    ("multiple", boxed("-1, 5"), "5, -1"),
    # --- equations and variables
    ("equation", boxed("x = 5"), "5"),
    ("equation", boxed("k=\\frac{1}{3}"), "\\frac{1}{3}"),
    ("equation", boxed("y = 2x + 3"), "2x+3"),
    ("equation", boxed("y = 2x + 3"), "y=2x+3"),
    ("equation", boxed("2x+3"), "y=2x+3"),
    ("equation", boxed("x = 6"), "5"),
    ("equation", boxed("a=3"), "3"),
    # --- LaTeX spacing and styling
    ("spacing", boxed("\\frac{1}{2} "), "\\frac{1}{2}"),
    ("spacing", boxed("\\frac {1} {2}"), "\\frac{1}{2}"),
    ("spacing", boxed("\\left( \\frac{1}{3} \\right)"), "\\frac{1}{3}"),
    ("spacing", boxed("\\displaystyle\\frac{1}{3}"), "\\frac{1}{3}"),
    ("spacing", boxed("1\\!000"), "1000"),
    ("spacing", boxed("3\\sqrt{2}"), "3 \\sqrt 2"),
    ("spacing", boxed("\\sqrt 2+\\sqrt 5"), "\\sqrt{2}+\\sqrt{5}"),
    ("spacing", boxed("\\mathbf{12}"), "12"),
    ("spacing", boxed("\\textbf{12}"), "12"),
    ("spacing", boxed("7425000"), "7,425,000"),
    ("spacing", boxed("7,425,000"), "7425000"),
    ("spacing", boxed("1\\ 000"), "1000"),
    # --- radicals, pi and equivalent expressions
    ("expression", boxed("\\sqrt{8}"), "2\\sqrt{2}"),
    ("expression", boxed("\\sqrt{12}"), "2\\sqrt{3}"),
    ("expression", boxed("\\sqrt{12}"), "3\\sqrt{2}"),
    ("expression", boxed("\\frac{\\sqrt{2}}{2}"), "\\frac{1}{\\sqrt{2}}"),
    ("expression", boxed("2\\pi"), "\\pi \\cdot 2"),
    ("expression", boxed("6.283185"), "2\\pi"),
    ("expression", boxed("3.14"), "\\pi"),
    ("expression", boxed("(x+1)^2"), "x^2+2x+1"),
    ("expression", boxed("x^2+2x+1"), "(x+1)^2"),
    ("expression", boxed("x^2+2x"), "(x+1)^2"),
    ("expression", boxed("2^{10}"), "1024"),
    ("expression", boxed("10!"), "3628800"),
    ("expression", boxed("\\binom{5}{2}"), "10"),
    ("expression", boxed("2 \\cdot 3"), "6"),
    ("expression", boxed("2\\times 3"), "6"),
    ("expression", boxed("\\sqrt[3]{27}"), "3"),
    ("expression", boxed("\\log_2 8"), "3"),
    ("expression", boxed("e^{i\\pi}"), "-1"),
    ("expression", boxed("\\frac{1+\\sqrt{5}}{2}"), "\\frac{\\sqrt{5}+1}{2}"),
    ("expression", boxed("\\frac{1-\\sqrt{5}}{2}"), "\\frac{\\sqrt{5}+1}{2}"),
    ("expression", boxed("a(b+c)"), "ab+ac"),
    ("expression", boxed("\\sqrt{2}+\\sqrt{3}"), "\\sqrt{5+2\\sqrt{6}}"),
    # --- scientific notation
    ("scientific", boxed("1.5\\times10^{3}"), "1500"),
    ("scientific", boxed("1.5 \\cdot 10^3"), "1500"),
    ("scientific", boxed("1.5e3"), "1500"),
    ("scientific", boxed("3\\times 10^{-2}"), "0.03"),
    ("scientific", boxed("3\\times 10^{-3}"), "0.03"),
    # --- matrices
    ("matrix", boxed("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}"), "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
    ("matrix", boxed("\\begin{bmatrix} 1 & 2 \\\\ 3 & 4 \\end{bmatrix}"), "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
    ("matrix", boxed("\\begin{pmatrix} 1 & 2 \\\\ 3 & 5 \\end{pmatrix}"), "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
    ("matrix", boxed("\\begin{pmatrix} \\frac{1}{2} \\\\ 3 \\end{pmatrix}"), "\\begin{pmatrix}0.5\\\\3\\end{pmatrix}"),
    ("matrix", boxed("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"), "\\begin{pmatrix}1 & 2\\end{pmatrix}"),
    # --- text answers
    ("text", boxed("\\text{east}"), "\\text{east}"),
    ("text", boxed("east"), "\\text{east}"),
    ("text", boxed("\\text{(C)}"), "\\text{(C)}"),
    ("text", boxed("C"), "\\text{(C)}"),
    ("text", boxed("(C)"), "C"),
    ("text", boxed("B"), "C"),
    ("text", boxed("\\text{Monday}"), "\\text{Tuesday}"),
    ("text", boxed("\\text{odd}"), "\\text{odd}"),
    # --- no answer at all
    ("no-answer", "I could not solve it.", "5"),
    ("no-answer", "The answer is 5.", "5"),
    ("no-answer", "\\boxed{}", "5"),
]


def main():
    out = sys.stdout
    for cls, completion, gold in PAIRS:
        gold_parsed = parse("$" + gold + "$")
        pred_parsed = parse(completion)
        equal = bool(verify(gold_parsed, pred_parsed))
        out.write(json.dumps({"class": cls, "completion": completion, "gold": gold, "math_verify": equal},
                             ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
