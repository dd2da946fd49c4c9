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

from typing import Any

import orjson

from amaris_cli import artifacts
from amaris_cli.errors import InputError
from amaris_cli.rundir import RunDir

FORMATS = ("jsonl", "list")


def rewards_rows(run: RunDir, step: int, rescored: bool = False, failed_as: float | None = None) -> list[dict[str, Any]]:
    name = artifacts.RESCORES if rescored else artifacts.SCORES
    path = artifacts.scores_path(run, step, name)
    made = artifacts.derivation(run, step, name)
    if not path.exists() or made is None or artifacts.output_sha(run, step, name) is None:
        raise InputError(path, f"step {step} has no complete {name} (is the stage finished?)")
    if made.inputs.get("rollouts") != artifacts.output_sha(run, step, artifacts.ROLLOUTS):
        raise InputError(path, f"step {step}: {name} scores other rollouts than the step now holds "
                               "(it is being scored again, or its rollouts were replaced)")
    by_id = {r.rollout_id: r for r in artifacts.load_scores(run, step, name)}
    rows: list[dict[str, Any]] = []
    for rollout in artifacts.load_rollouts(run, step):
        record = by_id.get(rollout.id)
        if record is None:
            raise InputError(path, f"rollout {rollout.id!r} has no score")
        reward = record.reward if record.status == "scored" or record.reward is not None else failed_as
        rows.append({"id": rollout.id, "reward": reward, "status": record.status})
    return rows


def rewards_bytes(run: RunDir, step: int, fmt: str, rescored: bool = False, failed_as: float | None = None) -> bytes:
    rows = rewards_rows(run, step, rescored, failed_as)
    if fmt == "list":
        return orjson.dumps([r["reward"] for r in rows]) + b"\n"
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)
