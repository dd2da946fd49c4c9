"""Rewards back to the trainer, in input order.

`jsonl`: one `{"id", "reward", "status"}` per rollout, keyed by the rollout id (a verl/OpenRLHF
reward server or a custom TRL reward function looks rewards up by id). `list`: a JSON list of
rewards in the order of the step's input file. A rollout that could not be judged is `null`
(TRL reads None as "no score") unless `failed_as` gives a number.
"""

from __future__ import annotations

from typing import Any

import orjson

from amaris_cli.errors import InputError
from amaris_cli.jsonio import iter_jsonl
from amaris_cli.models import ScoreRecord
from amaris_cli.rundir import RunDir
from amaris_cli.stages.common import load_rollouts


def rewards(run: RunDir, step: int, fmt: str, rescored: bool = False, failed_as: float | None = None) -> bytes:
    name = "rescores.jsonl" if rescored else "scores.jsonl"
    path = run.step_dir(step) / name
    if not path.exists():
        raise InputError(path, f"step {step} has no {name}")
    by_id = {r.rollout_id: r for r in (ScoreRecord.model_validate(row) for row in iter_jsonl(path))}
    order = [r.id for r in load_rollouts(run, step)]
    rows: list[dict[str, Any]] = []
    for rid in order:
        record = by_id.get(rid)
        if record is None:
            raise InputError(path, f"rollout {rid!r} has no score (is the stage finished?)")
        reward = record.reward if record.status == "scored" else failed_as
        rows.append({"id": rid, "reward": reward, "status": record.status})
    if fmt == "list":
        return orjson.dumps([r["reward"] for r in rows]) + b"\n"
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)
