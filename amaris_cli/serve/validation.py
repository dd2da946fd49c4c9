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
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from amaris_cli.jsonio import append_line, iter_models_numbered
from amaris_cli.models import Rollout, ScoreRecord
from amaris_cli.rundir import RunDir

VALIDATION_DIR = "validation"
_FILE = re.compile(r"step-(\d{6,})\.jsonl")


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


def validation_steps(run: RunDir) -> list[int]:
    """The steps with validation answers, in order."""
    try:
        names = os.listdir(run.path / VALIDATION_DIR)
    except FileNotFoundError:
        return []
    # (only the names validation_path gives: "step-0000000.jsonl" would be step 0 read from another file)
    return sorted(int(m.group(1)) for name in names
                  if (m := _FILE.fullmatch(name)) and validation_path(run, int(m.group(1))).name == name)


def load_validation(run: RunDir, step: int) -> list[ValidationEntry]:
    """The step's validation answers in the order they were given (a torn last line, one being written, is not
    one yet; a bad line elsewhere is an error naming the file and line)."""
    return [entry for _, entry in iter_models_numbered(validation_path(run, step), ValidationEntry)]


class ValidationAnswers:
    """The latest scored answer to each validation id of the few steps a server validates now (a client's retry
    is answered from here), read from the step's file once: the file keeps every answer, the last one counts."""

    KEPT_STEPS = 4

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self._steps: dict[int, dict[str, tuple[Rollout, ScoreRecord]]] = {}

    def answers(self, step: int) -> dict[str, tuple[Rollout, ScoreRecord]]:
        if step not in self._steps:
            self._steps[step] = {e.rollout.id: (e.rollout, e.record) for e in load_validation(self.run, step)
                                 if e.record.status == "scored"} if validation_path(self.run, step).exists() else {}
            while len(self._steps) > self.KEPT_STEPS:
                del self._steps[next(iter(self._steps))]  # the step read longest ago
        return self._steps[step]
