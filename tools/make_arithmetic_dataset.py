#!/usr/bin/env python3
"""Writes a small arithmetic word-problem dataset with known answers (JSONL, one problem a line).

Every problem is two or three whole-number steps over everyday objects; the answer is computed here,
so it is right by construction. Seeded: a rerun writes the same bytes.

    python3 tools/make_arithmetic_dataset.py                  # tests/fixtures/eval/arithmetic.jsonl (40)
    python3 tools/make_arithmetic_dataset.py --count 200 --out /tmp/arith.jsonl --seed 7
"""
import argparse
import json
import random
from pathlib import Path

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jon", "Kira", "Liam"]
THINGS = ["apples", "marbles", "stickers", "books", "pencils", "cookies", "coins", "stamps", "shells", "cards"]


def problem(rng: random.Random) -> tuple[str, int]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    kind = rng.randrange(4)
    if kind == 0:
        a, b, c = rng.randint(5, 40), rng.randint(2, 30), rng.randint(1, 20)
        c = min(c, a + b)
        return (f"{name} has {a} {thing}. {name} gets {b} more and then gives away {c}. "
                f"How many {thing} does {name} have now?", a + b - c)
    if kind == 1:
        boxes, per = rng.randint(2, 9), rng.randint(3, 12)
        extra = rng.randint(1, 9)
        return (f"{name} buys {boxes} boxes with {per} {thing} in each box, and finds {extra} more {thing}. "
                f"How many {thing} does {name} have in total?", boxes * per + extra)
    if kind == 2:
        friends, per = rng.randint(2, 8), rng.randint(2, 9)
        left = rng.randint(0, friends - 1)
        total = friends * per + left
        return (f"{name} shares {total} {thing} equally among {friends} friends, giving each friend as many "
                f"as possible. How many {thing} does each friend get?", per)
    price, count, paid = rng.randint(2, 9), rng.randint(2, 6), 0
    paid = price * count + rng.randint(1, 20)
    return (f"A notebook costs {price} dollars. {name} buys {count} notebooks and pays with {paid} dollars. "
            f"How many dollars of change does {name} get?", paid - price * count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parent.parent / "tests/fixtures/eval/arithmetic.jsonl")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        for i in range(args.count):
            question, answer = problem(rng)
            f.write(json.dumps({"id": f"arith-{i:03d}", "question": question, "answer": str(answer)}) + "\n")
    print(f"wrote {args.count} problems to {args.out}")


if __name__ == "__main__":
    main()
