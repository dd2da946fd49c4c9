"""The failure policy: what a rollout that could not be judged or analyzed does.

    fail     the stage writes every record (failed ones with their error) and the command exits 4;
             a step with failed scores or analyses goes no further (not analyzed, summarized or updated)
    skip     failed records stay failed (reward null); the step goes on without them
    neutral  like skip, but a failed score records `pipeline.neutral_reward` as its reward (status
             stays `failed`), and `amaris rewards` exports that reward

It is a setting (`pipeline.on_error`, which the `--on-error` flag sets as its layer), read here and
nowhere else, and applied here for every per-rollout stage (score, rescore, analyze) in every command,
in `loop` and in `serve`. A step keeps the policy it was scored under: its evolution (and a replay of it)
reads it from the scores' provenance unless the command sets one (`recorded_layer`).

Under skip and neutral, a step whose rollouts could not be judged or analyzed (or whose summarizer or
updater gave no answer) still evolves, as *skipped*: amaris writes its summary (the gap and its counts, so
the memory keeps it) and carries the rubric forward unchanged (update.json `carried_forward`); later
steps are scored as usual. Under fail the step goes no further, and the command that met the failure
fails with it; a later step that needs the step names that root cause and the command that resumes.
With `pipeline.failed_step = "carry"` (what `serve` gives its evolutions: its trainer was answered for each
rollout, failed ones as failed, and nothing over HTTP can score a complete step again) such a step still
learns nothing, but evolves as skipped, so the steps after it are scored with the rubric carried forward.
In a per-instance run it is the instances with failed records that learn nothing (`NotEvaluated`): the
step's other instances are summarized and updated as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from amaris_cli import artifacts
from amaris_cli.config import Settings
from amaris_cli.errors import StageFailed
from amaris_cli.models import ScoreRecord
from amaris_cli.rundir import RunDir

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


def recorded_layer(run: RunDir, step: int) -> dict[str, Any]:
    """The policy the step's scores were written under, and the `failed_step` its last evolution ran with (a
    served step's: `carry`, which its scores do not record), as a settings layer ({} when none is recorded)."""
    scored = artifacts.derivation(run, step, artifacts.SCORES)
    recorded = (scored.inputs.get("policy") or {}) if scored else {}
    evolved = artifacts.evolution(run, step)
    pipeline = {"on_error": recorded.get("on_error"), "neutral_reward": recorded.get("neutral_reward"),
                "failed_step": (evolved.flags.get("pipeline") or {}).get("failed_step") if evolved else None}
    pipeline = {k: v for k, v in pipeline.items() if v is not None}
    return {"pipeline": pipeline} if pipeline else {}


@dataclass(frozen=True)
class FailurePolicy:
    name: PolicyName
    neutral_reward: float
    carry: bool = False  # pipeline.failed_step = "carry"

    @classmethod
    def of(cls, settings: Settings) -> FailurePolicy:
        pipeline = settings.pipeline
        return cls(name=pipeline.on_error, neutral_reward=pipeline.neutral_reward, carry=pipeline.failed_step == "carry")

    @property
    def skips_failed_steps(self) -> bool:
        """Whether a step whose summarizer or updater gave no answer evolves as skipped (else it fails)."""
        return self.name != "fail" or self.carry

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
            raise StageFailed(found.message, found.retry)

    def not_evaluated(self, stage: str, step: int, failed: int, total: int, errors: list[str],
                      retry: str = RETRY) -> str | None:
        """For a step's evolution: `check`, except that under `fail` with `carry` it answers why the step evolves as
        skipped instead of raising (the counts, not the errors: the reason goes to memory and to the updater).
        None: the step goes on."""
        found = self.failure(stage, step, failed, total, errors, retry)
        if found is None:
            return None
        if not self.carry:
            raise StageFailed(found.message, found.retry)
        return (f"{failed} of the step's {total} rollouts could not be {_verb(stage)}, and under on_error = fail a step "
                "with failed records is not evaluated")

    def instance_not_evaluated(self, stage: str) -> str:
        """Why an instance with failed records of a per-instance step evolves as skipped under `carry` (its counts
        are its summary's), while the step's other instances are evaluated."""
        return (f"rollouts of the instance could not be {_verb(stage)}, and under on_error = fail an instance with "
                "failed records is not evaluated (the step's other instances are)")


def _verb(stage: str) -> str:
    return "analyzed" if stage == "analyze" else "judged"


@dataclass(frozen=True)
class NotEvaluated:
    """Why a step's evolution learns nothing from the step (`step`) or, in a per-instance run, from some of its
    instances (`instances`: the others are evaluated). Empty: everything is evaluated."""

    step: str | None = None
    instances: Mapping[str, str] = field(default_factory=dict)

    def of(self, instance_id: str | None) -> str | None:
        """Why the group (an instance, or None: the step as a whole) is not evaluated, or None."""
        if self.step is not None or instance_id is None:
            return self.step
        return self.instances.get(instance_id)
