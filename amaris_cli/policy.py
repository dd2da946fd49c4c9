"""The failure policy: what a rollout that could not be judged or analyzed does.

    fail     the stage writes every record (failed ones with their error) and the command exits 4;
             a step with failed scores or analyses goes no further (not analyzed, summarized or updated)
    skip     failed records stay failed (reward null); the step goes on without them
    neutral  like skip, but a failed score records `pipeline.neutral_reward` as its reward (status
             stays `failed`), and `amaris rewards` exports that reward

It is a setting (`pipeline.on_error`, which the `--on-error` flag sets as its layer), read here and
nowhere else, and applied here for every per-rollout stage (score, rescore, analyze) in every command,
in `loop` and in `serve`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from amaris_cli.config import Settings
from amaris_cli.errors import StageFailed
from amaris_cli.models import ScoreRecord

PolicyName = Literal["fail", "skip", "neutral"]
RETRY = "re-run the same command to retry them"


@dataclass(frozen=True)
class StageFailure:
    """Some records of a stage failed under `fail`: everything else is written; the command exits 4."""

    stage: str
    step: int
    failed: int
    total: int
    errors: tuple[str, ...]
    retry: str = RETRY

    @property
    def message(self) -> str:
        first = f"; first: {self.errors[0]}" if self.errors else ""
        verb = "analyzed" if self.stage == "analyze" else "judged"
        return (f"step {self.step}: {self.failed} of {self.total} rollouts could not be {verb} (written as failed"
                f"{first}); {self.retry}, or use --on-error skip|neutral")


@dataclass(frozen=True)
class FailurePolicy:
    name: PolicyName
    neutral_reward: float

    @classmethod
    def of(cls, settings: Settings) -> FailurePolicy:
        pipeline = settings.pipeline
        return cls(name=pipeline.on_error, neutral_reward=pipeline.neutral_reward)

    def as_inputs(self) -> dict[str, object]:
        """What a file written under this policy depends on."""
        return {"on_error": self.name, "neutral_reward": self.neutral_reward if self.name == "neutral" else None}

    def score(self, record: ScoreRecord) -> ScoreRecord:
        if record.status == "failed" and self.name == "neutral":
            return record.model_copy(update={"reward": self.neutral_reward})
        return record

    def failure(self, stage: str, step: int, failed: int, total: int, errors: list[str],
                retry: str = RETRY) -> StageFailure | None:
        """Under `fail`, what a stage with failed records reports (None otherwise). `retry` says how to retry
        them when it is not the command that stops (a later stage)."""
        if failed and self.name == "fail":
            return StageFailure(stage, step, failed, total, tuple(errors), retry)
        return None

    def check(self, stage: str, step: int, failed: int, total: int, errors: list[str], retry: str = RETRY) -> None:
        """`failure`, raised: for a stage whose failure ends the work in progress (an evolution, a loop)."""
        found = self.failure(stage, step, failed, total, errors, retry)
        if found is not None:
            raise StageFailed(found.message)
