"""Validation rollouts: a trainer's evaluation of its policy, judged beside training but never part of it.

verl scores its validation set with the training's reward function, stamped with the same weights version
as the next training batch; as training rollouts they joined that step (its evolution learned from them,
and under --rollouts-per-step they took training rollouts' places). `POST /validate` takes the bodies
/score takes: the rollout is judged with the rubric version a training rollout of its step gets, joins no
step, and is kept here, one line per answer:

    RUN/validation/step-NNNNNN.jsonl    {"rollout": {...}, "record": {...}}

The file is this server's alone (one server per run); a line is written whole or not at all.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from amaris_cli.jsonio import append_line
from amaris_cli.models import Rollout, ScoreRecord
from amaris_cli.rundir import RunDir

VALIDATION_DIR = "validation"


class ValidationEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rollout: Rollout
    record: ScoreRecord


def validation_path(run: RunDir, step: int) -> Path:
    return run.path / VALIDATION_DIR / f"step-{step:06d}.jsonl"


def record_validation(run: RunDir, step: int, rollout: Rollout, record: ScoreRecord) -> None:
    path = validation_path(run, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        append_line(fd, ValidationEntry(rollout=rollout, record=record).model_dump(mode="json"), path)
    finally:
        os.close(fd)
