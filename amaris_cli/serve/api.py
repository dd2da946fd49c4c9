"""The HTTP API of `amaris serve`: every request and response body, as pydantic models.

    POST /score                 ScoreRequest or ReferenceScoreRequest -> ScoreResponse   one rollout
    POST /validate              the same -> ScoreResponse            a validation rollout: joins no step
    POST /complete              CompleteRequest -> CompleteResponse   the step's (or a shard's) rollouts are in
                                (no body: the reference's) -> ReferenceComplete or CompleteNoop
    GET  /rubric_status/wait    ?step=N&timeout=S -> RubricStatus    blocks until the step's evolution ends
                                (no query: the reference's) -> ReferenceRubricStatus
    GET  /rubric_status         ?step=N -> RubricStatus              the same, without waiting
    POST /discard               DiscardRequest -> DiscardResponse    drop an open step (a crashed trainer's)
    POST /outage                OutageRequest -> CompleteResponse    a step whose batch never reached the server
    POST /get_reward            OpenRLHF's request -> its answer (openrlhf.py)
    GET  /health                -> Health

Every error is a JSON `ErrorResponse` with a 4xx or 5xx status (README, "amaris serve").
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from amaris_cli.alarms import Alarm
from amaris_cli.stepfiles import step_number
from amaris_cli.training import TrainingMetadata

StepState = Literal["open", "completing", "evolving", "done", "failed", "idle"]
MAX_SHARDS = 65536
_INT = TypeAdapter(int)


def check_step(value: Any) -> int | None:
    """A step as rollout files give it (stepfiles.step_number), or None."""
    return None if value is None else step_number(value)


class ScoreMetadata(TrainingMetadata):
    """Training metadata. `current_step` names the step; the reference's TrainingMetadata fields
    (high_level_goal, model_size, total_steps, other_context) describe training (training.py); anything
    else is kept with the rollout."""

    model_config = ConfigDict(extra="allow")
    current_step: int | None = None
    instance_id: str | int | None = None

    @field_validator("current_step", mode="before")
    @classmethod
    def _step(cls, value: Any) -> int | None:
        # The reference's `current_step: int` is a pydantic int, which takes "3" as 3 (as `total_steps` here does):
        # a trainer that sends its step as a string was refused on every call. "1.5" or "x" is still refused.
        if isinstance(value, str):
            with contextlib.suppress(ValidationError):
                value = _INT.validate_python(value)
        return check_step(value)


class ScoreRequest(BaseModel):
    """One rollout in amaris's shape: any field name a rollout line may use is read the same way as in a
    file (README, "Rollout input": `prompt`/`response`/`reference`, `input`/`output`, `completion`,
    `messages`, `ground_truth`, `answer`, ...), so a line of a rollout file plus `"metadata":
    {"current_step": N}` is a valid body. The step is `metadata.current_step` (or a top-level
    `step`/`global_step`, which must then agree); without one the rollout joins the server's open step.
    `id` is optional: a rollout without one gets the content id a file line would get (`-2`, `-3`, ...
    for repeats within the step)."""

    model_config = ConfigDict(extra="allow")
    id: str | int | None = None
    prompt: str | list[dict[str, Any]] | None = None
    response: str | list[dict[str, Any]] | None = None
    reference: str | int | float | list[Any] | dict[str, Any] | None = None
    instance_id: str | int | None = None
    metadata: ScoreMetadata = Field(default_factory=ScoreMetadata)


class ReferenceScoreRequest(BaseModel):
    """The reference's body: `{"rollout": {"id", "input", "output", "supplemental_context", "metadata"},
    "metadata": {"high_level_goal", "model_size", "current_step", "total_steps", "other_context"}}`.
    The rollout is read as a line of a rollout file; the metadata as ScoreMetadata (a key other than the
    TrainingMetadata fields is kept with the rollout, as in amaris's shape)."""

    model_config = ConfigDict(extra="forbid")
    rollout: dict[str, Any]
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
    """A step's rollouts are in; from one process of `shards` (its rank `shard`), that process's share."""

    model_config = ConfigDict(extra="forbid")
    step: int = Field(validation_alias=AliasChoices("step", "current_step"))
    shard: int = Field(default=0, ge=0)
    shards: int = Field(default=1, ge=1, le=MAX_SHARDS)

    @field_validator("step", mode="before")
    @classmethod
    def _step(cls, value: Any) -> int | None:
        return check_step(value)

    @model_validator(mode="after")
    def _shard_in_range(self) -> CompleteRequest:
        if self.shard >= self.shards:
            raise ValueError(f"shard {self.shard} of {self.shards}: a shard is a process rank from 0 to shards-1")
        return self


class CompleteResponse(BaseModel):
    """`state` "open" with `missing_shards` while some processes' shards are not in yet; the figures are
    then those of the rollouts judged so far."""

    step: int
    rollouts: int
    scored: int
    failed: int
    mean_reward: float | None
    rubric_versions: list[int]
    state: StepState
    already_complete: bool = False
    shards: int = 1
    missing_shards: list[int] = Field(default_factory=list)


class ReferenceComplete(CompleteResponse):
    """The answer to the reference's /complete (no body): its `status`, with amaris's fields."""

    status: Literal["complete"] = "complete"


class CompleteNoop(BaseModel):
    """The reference's answer to a /complete without a body under `--rollouts-per-step`: steps complete
    themselves after N rollouts."""

    status: Literal["noop"] = "noop"
    rollouts_per_step: int


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
    skipped: str | None = None  # done without evaluating the step (the judge unreachable, failed records), and why
    # evolving, but waiting on an earlier step that has no rollouts and that nobody is sending: what to send
    blocked: str | None = None
    alarms: list[Alarm] = Field(default_factory=list)  # hacking-onset alarms of the run up to the step


class ReferenceRubricStatus(RubricStatus):
    """The answer to the reference's wait (no query), once every update of the step is done: its `status`
    and rubric `mode`, with amaris's fields (`updated` false for a step whose update was not due)."""

    status: Literal["updated"] = "updated"
    mode: Literal["global", "per_instance"] = "global"


class OpenStepStatus(BaseModel):
    """A step the server holds open: rollouts claimed (judged or being judged), those judged, which
    processes' shards have sent /complete (of `shards`, once one has), and when its first rollout came."""

    step: int
    state: StepState
    rollouts: int
    judged: int
    shards: int | None = None
    shards_in: list[int] = Field(default_factory=list)
    opened_at: float | None = None  # the server's clock (epoch seconds); None: opened by an older server


class Health(BaseModel):
    """`open`: the steps this server holds open, e.g. the ones a trainer that crashed left: a restarted
    trainer completes (POST /complete) or drops (POST /discard) them."""

    status: Literal["ok", "stopping"]
    run: str
    mode: Literal["async", "sync"]
    lag: int
    rollouts_per_step: int | None
    open_steps: list[int]
    open: list[OpenStepStatus] = Field(default_factory=list)
    version: str
    # The server's clock as it answered (epoch seconds), against which a client on another machine reads
    # `opened_at` and sends `opened_before`; None from an older server.
    now: float | None = None


class DiscardRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: int
    # Only a step that opened before this time (the server's clock, epoch seconds): a trainer's process that
    # saw a crashed run's step open does not drop the step another process discarded and opened again since.
    opened_before: float | None = Field(default=None, strict=True, allow_inf_nan=False)  # a number, not true or "5"

    @field_validator("step", mode="before")
    @classmethod
    def _step(cls, value: Any) -> int | None:
        return check_step(value)


class OutageRequest(BaseModel):
    """A step the trainer generated none of whose rollouts reached the server (its requests failed before the server
    took them: it was down or restarting), and why: written with no rollouts, it evolves as skipped."""

    model_config = ConfigDict(extra="forbid")
    step: int
    reason: str = Field(default="", max_length=2000)

    @field_validator("step", mode="before")
    @classmethod
    def _step(cls, value: Any) -> int | None:
        return check_step(value)


class DiscardResponse(BaseModel):
    step: int
    discarded: int  # judged rollouts dropped with the step


class ErrorResponse(BaseModel):
    error: str
    details: list[str] = Field(default_factory=list)
    step: int | None = None
    id: str | None = None
