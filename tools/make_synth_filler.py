#!/usr/bin/env python3
"""Writes configs/synth/filler.txt: reasoning-style prose (arithmetic steps, checks, restarts) that the
synthetic-retrieval probe cuts its filler from. Deterministic; the output is dedicated to the public
domain (CC0). Numbers stay below 1000, so few 4-digit values are screened out."""
import random
import sys

rng = random.Random(20260723)


def sentence():
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    n = rng.randint(3, 30)
    return rng.choice([
        f"First, {a} plus {b} gives {a + b}, so the running total moves up.",
        f"Let me double-check that: {a} times {b % 10 + 2} is {a * (b % 10 + 2)}.",
        f"Hmm, wait. If one side is {a} and the other is {b}, the difference is {abs(a - b)}.",
        "Let me reconsider the previous step before going on.",
        f"The remainder of {a * 7 + 3} divided by 7 is 3, which matches what we expected.",
        f"Now take n = {n}; then 2n = {2 * n} and n squared is {n * n}.",
        "So far the pieces fit together, but the boundary case still needs a look.",
        f"Suppose the sequence starts at {a} and grows by {b % 9 + 1} each step; after {n % 9 + 2} steps it reaches {a + (b % 9 + 1) * (n % 9 + 2)}.",
        "That cannot be right, because the total would then exceed the bound we found earlier.",
        f"Dividing {a * 4} by 4 gives back {a}, a useful sanity check.",
        "Alternatively, we could count the complement and subtract it from the whole.",
        f"The area of a {a % 20 + 1} by {b % 20 + 1} rectangle is {(a % 20 + 1) * (b % 20 + 1)}.",
        "I think the cleaner path is to set up the equation first and solve it afterwards.",
        f"The greatest common divisor of {a * 6} and {b * 6} is at least 6.",
        "Let me write the cases out one by one so that nothing is missed.",
        f"If x = {n}, then 3x + 1 = {3 * n + 1}, which is {'even' if (3 * n + 1) % 2 == 0 else 'odd'}.",
        "Okay, that settles this part; the next part uses the same idea.",
        f"Adding the first {n} odd numbers gives {n * n}, a perfect square as always.",
    ])


def paragraph():
    return " ".join(sentence() for _ in range(rng.randint(4, 8)))


words = 0
paragraphs = []
while words < 6000:
    p = paragraph()
    words += len(p.split())
    paragraphs.append(p)
out = sys.argv[1] if len(sys.argv) > 1 else "configs/synth/filler.txt"
with open(out, "w") as f:
    f.write("\n\n".join(paragraphs) + "\n")
