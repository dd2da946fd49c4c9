"""The HTTP API of `amaris serve`: every request and response body, as pydantic models.

    POST /score                 ScoreRequest -> ScoreResponse    one rollout, judged as it arrives
    POST /complete              CompleteRequest -> CompleteResponse   the step's rollouts are in
    GET  /rubric_status/wait    ?step=N&timeout=S -> RubricStatus    blocks until the step's evolution ends
    GET  /rubric_status         ?step=N -> RubricStatus              the same, without waiting
    GET  /health                -> Health

Every error is a JSON `ErrorResponse` with a 4xx or 5xx status (README, "amaris serve").
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from amaris_cli.alarms import Alarm
from amaris_cli.stepfiles import step_number

StepState = Literal["open", "completing", "evolving", "done", "failed", "idle"]


def check_step(value: Any) -> int | None:
    """A step as rollout files give it (stepfiles.step_number), or None."""
    return None if value is None else step_number(value)


class ScoreMetadata(BaseModel):
    """Training metadata. `current_step` names the step; anything else is kept with the rollout."""

    model_config = ConfigDict(extra="allow")
    current_step: int | None = None
    instance_id: str | int | None = None

    @field_validator("current_step", mode="before")
    @classmethod
    def _step(cls, value: Any) -> int | None:
        return check_step(value)


class ScoreRequest(BaseModel):
    """One rollout. The reference's fields are `prompt`, `response` and `reference`; any field name a
    rollout line may use is read the same way as in a file (README, "Rollout input": `input`/`output`,
    `completion`, `messages`, `ground_truth`, `answer`, ...), so a line of a rollout file plus
    `"metadata": {"current_step": N}` is a valid body. The step is `metadata.current_step` (or a
    top-level `step`/`global_step`, which must then agree). `id` is optional: a rollout without one gets
    the content id a file line would get (`-2`, `-3`, ... for repeats within the step)."""

    model_config = ConfigDict(extra="allow")
    id: str | int | None = None
    prompt: str | list[dict[str, Any]] | None = None
    response: str | list[dict[str, Any]] | None = None
    reference: str | int | float | list[Any] | dict[str, Any] | None = None
    instance_id: str | int | None = None
    metadata: ScoreMetadata = Field(default_factory=ScoreMetadata)


class ScoreValue(BaseModel):
    score: float | None
    rubric_version: int
    status: Literal["scored", "failed"]
    error: str | None = None


class ScoreResponse(BaseModel):
    """`score` is exactly what `amaris rewards` (`--rescored` when `rescored`) exports for the rollout:
    the reward, or for a rollout the judge could not score `null` (the neutral reward under
    `--on-error neutral`) with `status: "failed"` and the `error`. Never a made-up number."""

    score: float | None
    id: str
    step: int
    rubric_version: int
    status: Literal["scored", "failed"]
    error: str | None = None
    instance_id: str | None = None
    rescored: bool = False
    initial: ScoreValue | None = None  # sync mode, when `rescored`: the score before the step's update


class CompleteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: int = Field(validation_alias=AliasChoices("step", "current_step"))

    @field_validator("step", mode="before")
    @classmethod
    def _step(cls, value: Any) -> int | None:
        return check_step(value)


class CompleteResponse(BaseModel):
    step: int
    rollouts: int
    scored: int
    failed: int
    mean_reward: float | None
    rubric_versions: list[int]
    state: StepState
    already_complete: bool = False


class RubricStatus(BaseModel):
    """Where the evolution of `step` stands. `open`: rollouts are still arriving; `completing`: its
    files are being written; `evolving`: analyze, summarize and update run; `done`; `failed` (`error`
    says why); `idle`: complete, but no evolution has run or runs (restart the server, or run
    `amaris evolve`). `rubric_version` is the version the step's update wrote (step + 1) when it
    updated; `latest_version` the run's newest (global) rubric version."""

    step: int
    state: StepState
    updated: bool | None = None
    rubric_version: int | None = None
    latest_version: int | None = None
    error: str | None = None
    timed_out: bool = False
    skipped: str | None = None  # done without evaluating the step (the judge was unreachable), and why
    alarms: list[Alarm] = Field(default_factory=list)  # hacking-onset alarms of the run up to the step


class Health(BaseModel):
    status: Literal["ok", "stopping"]
    run: str
    mode: Literal["async", "sync"]
    lag: int
    rollouts_per_step: int | None
    open_steps: list[int]
    version: str


class ErrorResponse(BaseModel):
    error: str
    details: list[str] = Field(default_factory=list)
    step: int | None = None
    id: str | None = None
