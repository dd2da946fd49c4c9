"""Where the test suite's CPU goes, per file, from a log the suite writes when asked:

    TEST_CPU_LOG=/tmp/cpu.jsonl make test
    .venv/bin/python bench/suite_cpu.py /tmp/cpu.jsonl [--tests 20]

The suite runs on 2 cores, so its wall time is bound by its CPU (its own and its children's: `amaris`
processes, servers, trainers), which `pytest --durations` (wall time) does not show.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--tests", type=int, default=20, help="how many of the costliest tests to list")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.log.read_text(encoding="utf-8").splitlines() if line.strip()]
    files: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for row in rows:
        totals = files[row["test"].split("::")[0]]
        totals[0] += 1
        totals[1] += row["cpu"]
        totals[2] += row["children_cpu"]
        totals[3] += row["wall"]
    own, children = sum(f[1] for f in files.values()), sum(f[2] for f in files.values())
    print(f"{len(rows)} tests: CPU {own + children:.0f} s ({own:.0f} s in the test processes, {children:.0f} s in "
          f"their children), wall {sum(f[3] for f in files.values()):.0f} s summed over tests\n")
    print(f"{'CPU s':>8} {'own':>7} {'children':>9} {'wall s':>7} {'tests':>6}  file")
    for name, (count, cpu, kids, wall) in sorted(files.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        print(f"{cpu + kids:8.1f} {cpu:7.1f} {kids:9.1f} {wall:7.1f} {int(count):6d}  {name}")
    print(f"\nthe {args.tests} costliest tests (CPU s, wall s):")
    for row in sorted(rows, key=lambda r: -(r["cpu"] + r["children_cpu"]))[: args.tests]:
        print(f"{row['cpu'] + row['children_cpu']:8.1f} {row['wall']:7.1f}  {row['test']}")


if __name__ == "__main__":
    main()
