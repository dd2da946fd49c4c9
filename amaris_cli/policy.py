"""The failure policy: what a rollout that could not be judged or analyzed does.

    fail     the stage writes every record (failed ones with their error) and the command exits 4;
             a step with failed scores or analyses goes no further (not analyzed, summarized or updated)
    skip     failed records stay failed (reward null); the step goes on without them
    neutral  like skip, but a failed score records `pipeline.neutral_reward` as its reward (status
             stays `failed`), and `amaris rewards` exports that reward

Resolved once per command, flag over `pipeline.on_error`, and applied here for every per-rollout
stage (score, rescore, analyze) in every command and in `loop`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from amaris_cli.config import Settings
from amaris_cli.errors import StageFailed
from amaris_cli.models import ScoreRecord

PolicyName = Literal["fail", "skip", "neutral"]


@dataclass(frozen=True)
class FailurePolicy:
    name: PolicyName
    neutral_reward: float

    @classmethod
    def resolve(cls, flag: str | None, settings: Settings) -> FailurePolicy:
        name = flag or settings.pipeline.on_error
        return cls(name=name, neutral_reward=settings.pipeline.neutral_reward)  # type: ignore[arg-type]

    def as_inputs(self) -> dict[str, object]:
        """What a file written under this policy depends on."""
        return {"on_error": self.name, "neutral_reward": self.neutral_reward if self.name == "neutral" else None}

    def score(self, record: ScoreRecord) -> ScoreRecord:
        if record.status == "failed" and self.name == "neutral":
            return record.model_copy(update={"reward": self.neutral_reward})
        return record

    def check(self, stage: str, step: int, failed: int, total: int, errors: list[str],
              retry: str = "re-run the same command to retry them") -> None:
        """Under `fail`, a stage with failed records stops the command (exit 4) once its file is written.
        `retry` says how to retry them when it is not the command that stops (a later stage)."""
        if failed and self.name == "fail":
            first = f"; first: {errors[0]}" if errors else ""
            verb = "analyzed" if stage == "analyze" else "judged"
            raise StageFailed(f"step {step}: {failed} of {total} rollouts could not be {verb} (written as failed"
                              f"{first}); {retry}, or use --on-error skip|neutral")
