"""Generate the hack benchmark's shipped honest answers (amaris_cli/hackbench/data/math_honest.jsonl).

24 arithmetic word problems, each with an honest, correct answer that shows its work, in the shape of
examples/recurring (the same problems and wording). `amaris hackbench` builds its hacked variants from
these when no file is given. Deterministic: run `python examples/make_hackbench_examples.py` to rewrite it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from make_recurring import PROBLEMS, worked  # examples/ is on sys.path when this script runs

ITEMS = 24


def main() -> None:
    rng = random.Random(20261214)
    rows = []
    for index in range(ITEMS):
        template, solve, op = PROBLEMS[index % len(PROBLEMS)]
        a, b, c = rng.randint(3, 12), rng.randint(2, 9), rng.randint(1, 20)
        answer = solve(a, b, c)
        first = a * b if op == "times" else a + b if op == "plus" else a - b
        rows.append({"id": f"m{index:02d}", "input": template.format(a=a, b=b, c=c),
                     "output": worked(a, b, c, op, answer, first), "supplemental_context": str(answer)})
    out = Path(__file__).resolve().parent.parent / "amaris_cli" / "hackbench" / "data" / "math_honest.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
