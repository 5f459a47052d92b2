#!/usr/bin/env python3
"""Writes the choice grader's corpus, tests/fixtures/eval/choice_pairs.jsonl: GPQA-style responses (four
options, gold a letter) with the verdict that is right ("expected") and, where the reference harness's
grader decides otherwise, why. The reference's verdict ("reference") is added by running it
(tools/eval/add_reference_verdicts.py --choice: the harness grades GPQA with its math grader, the
text after the last "boxed" against the gold letter). tests/eval/test_choice_answer.cpp requires
kvdice's verdict to be the expected one on every response. Standard library only:

    python3 tools/eval/make_choice_pairs.py > /tmp/choice.jsonl
    (cd VaSE/eval/reasoning_tasks && python3 KVDICE/tools/eval/add_reference_verdicts.py --choice) \\
        < /tmp/choice.jsonl > tests/fixtures/eval/choice_pairs.jsonl
"""
import json
import sys

REASONING = "The first option ignores the spin term, and the second double counts it. "

# (class, template, reason when the reference differs) with {X} the response's letter, {Y} another one.
TEMPLATES = [
    ("boxed", "Comparing the options, the answer is \\boxed{{{X}}}.", None),
    ("boxed", REASONING + "So the answer is $\\boxed{{\\text{{{X}}}}}$.", None),
    ("boxed", "Final answer: \\boxed{{({X})}}", None),
    ("boxed", "Final answer: \\boxed{{\\textbf{{{X}}}}}", None),
    ("boxed", "\\[\n\\boxed{{{X}}}\n\\]", None),
    ("boxed", "Option ({Y}) fails the units check, so the answer is \\boxed{{{X}}}.", None),
    ("boxed", "I first thought \\boxed{{{Y}}}, but rechecking the sign gives \\boxed{{{X}}}.", None),
    ("boxed-label", "The answer is \\boxed{{{X}) 4.2 eV}}.", None),
    ("boxed-label", "The answer is \\boxed{{{X}. It is a planet}}.", None),
    ("boxed-label", "The answer is \\boxed{{\\text{{Answer: }} {X}}}.", None),
    ("boxed-article", "The answer is \\boxed{{{X}. A planet}}.", None),
    ("boxed", "So $\\boxed{{\\mathrm{{{X}}}}}$", None),
    ("boxed-label", "The answer is \\boxed{{({X}) $2\\pi$}}.", None),
    ("boxed-range", "The answer is \\boxed{{E}}.", None),
    ("unboxed", "After weighing everything, I choose option {X}.", "unboxed"),
    ("boxed-lower", "The answer is \\boxed{{{x}}}.", None),
    ("boxed-value", "Option {X} gives 4.2 eV, so the answer is \\boxed{{4.2 \\text{{ eV}}}}.", None),
    ("boxed-two", "Both work: \\boxed{{{Y}, {X}}}", "two-letters"),
    ("boxed-two", "It is \\boxed{{{Y} or {X}}}", "two-letters"),
    ("unboxed", "The answer is ({X}).", "unboxed"),
    ("unboxed", REASONING + "Answer: {X}", "unboxed"),
    ("unboxed", "**Answer: {X}**", "unboxed"),
    ("unboxed", "The correct option is {X}.", "unboxed"),
    ("unboxed", "The answer is {X}. A quick dimensional check confirms it.", "unboxed"),
    ("box-then-text", "Earlier I boxed \\boxed{{{Y}}} by mistake.\n\nRechecking, the answer is ({X}).", "later-text"),
    ("no-answer", "I cannot decide between the options.", None),
    ("no-answer", "Each option has merit; a case can be made for several.", None),
]

REASONS = {
    "two-letters": "Two options boxed is no single answer; the reference takes the last letter of the box.",
    "unboxed": "The GPQA prompt asks for no box and the response states its option plainly; the reference reads only a box, so it scores every unboxed answer 0.",
    "later-text": "The response revises its boxed answer in plain text afterwards; the last statement is the answer. The reference reads only the box.",
}

LETTERS = "ABCD"


def main():
    n = 0
    for t, (cls, template, reason) in enumerate(TEMPLATES):
        for k, gold in enumerate(LETTERS):
            right = (t + k) % 2 == 0  # half the responses pick the gold letter
            x = gold if right else LETTERS[(k + 1) % 4]
            y = LETTERS[(k + 2) % 4] if LETTERS[(k + 2) % 4] != x else LETTERS[(k + 3) % 4]
            completion = template.format(X=x, Y=y, x=x.lower())
            if cls in ("boxed-value", "boxed-two", "boxed-range", "no-answer"):
                expected = False
            else:
                expected = x == gold
            pair = {"class": cls, "completion": completion, "gold": gold, "choices": 4, "expected": expected}
            if reason:
                pair["why"] = REASONS[reason].format(X=x)
            sys.stdout.write(json.dumps(pair, ensure_ascii=False) + "\n")
            n += 1


if __name__ == "__main__":
    main()
