"""Rewards back to the trainer, in input order.

`jsonl`: one `{"id", "reward", "status"}` per rollout, keyed by the rollout id (a verl/OpenRLHF
reward server or a custom TRL reward function looks rewards up by id). `list`: a JSON list of
rewards in the order of the step's input file. The reward is what the failure policy recorded:
a rollout that could not be judged has `null` (TRL reads None as "no score"), or the neutral reward
under `--on-error neutral`; `failed_as` replaces the null of failed rollouts with a number.

Only whole scores of the step's current rollouts are exported: a step being scored again, or one
whose rollouts changed since it was scored, is an error rather than a mix of old and new rewards.
"""

from __future__ import annotations

import orjson

from amaris_cli.reader import RunReader
from amaris_cli.rundir import RunDir

FORMATS = ("jsonl", "list")


def rewards_bytes(run: RunDir, step: int, fmt: str, rescored: bool = False, failed_as: float | None = None) -> bytes:
    rows = RunReader(run).rewards_rows(step, rescored, failed_as)
    if fmt == "list":
        return orjson.dumps([r["reward"] for r in rows]) + b"\n"
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)
