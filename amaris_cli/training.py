"""What a trainer says about training with a step's requests: the reference's TrainingMetadata.

The reference sends `{"high_level_goal", "model_size", "current_step", "total_steps", "other_context"}`
with every `/score` request. `current_step` names the step; the rest is recorded once per step in
`steps/NNNNNN/training.json` (the fields the requests gave, with the file's provenance saying where it
came from), and given to the agents that reason about training (analyzer, summarizer, query generator,
updater) for that step in place of the run's `[training]` settings: each field given replaces the
setting of the same meaning, a field not given keeps the run's. The scorer never sees it (its system
message stays the same at every step). A step without the file uses the run's settings, as before.

The text is the trainer's, sent over an unauthenticated API: the agents get it as data in a block
(agents/common.py), never as instructions. `replay` writes the recorded file into its run, so a replay
gives the agents what the requests gave.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:  # the model alone is imported by serve's API models, which trainers load
    from amaris_cli.artifacts import How
    from amaris_cli.config import TrainingSettings
    from amaris_cli.rundir import RunDir

TRAINING = "training.json"
FIELDS = ("high_level_goal", "model_size", "total_steps", "other_context")
METADATA_FIELDS = frozenset({"current_step", *FIELDS})  # what a request's `metadata` says about the step and training
# What the agents are shown of each text field: a goal or a context, not a document. The reference takes any
# length, so a request is never refused for it (its trainer would get a 422 on every call): training.json keeps
# the whole text, and the agents get its first characters with a note of how many are not shown.
SHOWN_CHARS = {"high_level_goal": 4000, "model_size": 200, "other_context": 4000}


class TrainingMetadata(BaseModel):
    """The fields of the reference's TrainingMetadata that describe training (its `current_step` is the
    step itself). Every field is optional: a request may give some, and the run's settings fill the rest."""

    model_config = ConfigDict(extra="forbid")
    high_level_goal: str | None = None
    model_size: str | None = None
    total_steps: int | None = Field(default=None, ge=1, le=10**9)
    other_context: str | None = None

    @field_validator("total_steps", mode="before")
    @classmethod
    def _unknown_total(cls, value: Any) -> Any:
        # The reference's `total_steps: int` takes any integer, and a trainer that does not know its length says so
        # with one below 1 (Hugging Face's TrainingArguments.max_steps is -1 unless set): a 422 on every call
        # before. Such a number is not a length to show the agents: the field is taken as not given (the run's
        # setting stands).
        number = value
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                number = int(value.strip())
        return None if isinstance(number, int) and not isinstance(number, bool) and number < 1 else value

    @property
    def empty(self) -> bool:
        return all(getattr(self, name) is None for name in FIELDS)

    def given(self) -> dict[str, Any]:
        """The fields the request gave, as training.json holds them."""
        return self.model_dump(mode="json", exclude_none=True)

    def as_inputs(self) -> dict[str, Any]:
        """What a file made from it depends on: the fields given, a text longer than the agents are shown as its
        length and digest (it was copied whole into the provenance of every stage of the step, per instance)."""
        return {name: _digest(value) if _cut(name, value) else value for name, value in self.given().items()}

    def shown(self) -> dict[str, Any]:
        """The fields given, each text as the agents are shown it (SHOWN_CHARS)."""
        return {name: _shown(value, name) for name, value in self.given().items()}

    def applied_to(self, settings: TrainingSettings) -> TrainingSettings:
        """The run's training settings with the fields given here in their place, as the agents are shown them."""
        shown = self.shown()
        names = {"high_level_goal": "goal", "model_size": "model_size", "total_steps": "total_steps",
                 "other_context": "context"}
        return settings.model_copy(update={names[name]: value for name, value in shown.items()})

    def differences(self, other: TrainingMetadata) -> list[str]:
        return [name for name in FIELDS if getattr(self, name) != getattr(other, name)]


def _digest(text: str) -> str:
    return f"{len(text)} characters, sha256 {hashlib.sha256(text.encode()).hexdigest()}"


def _cut(field: str, value: Any) -> bool:
    """Whether the agents are shown less than the whole of a field's value."""
    return field in SHOWN_CHARS and isinstance(value, str) and len(value) > SHOWN_CHARS[field]


def _shown(value: Any, field: str) -> Any:
    if not _cut(field, value):
        return value
    limit = SHOWN_CHARS[field]
    return f"{value[:limit]} [... {len(value) - limit} more characters of {field} not shown]"


@dataclass(frozen=True)
class SentTraining:
    """A step's training metadata and where it came from (training.json's provenance inputs)."""

    metadata: TrainingMetadata
    source: dict[str, Any]
    how: How | None = None  # the command settings the recorded file names (a replay writes it with them)


def training_path(run: RunDir, step: int) -> Path:
    return run.step_dir(step) / TRAINING


def load_training(run: RunDir, step: int) -> TrainingMetadata | None:
    """The step's recorded training metadata, or None when its requests gave none."""
    path = training_path(run, step)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return TrainingMetadata.model_validate_json(data)


def recorded_training(run: RunDir, step: int) -> SentTraining | None:
    """The step's training.json with where it came from: what a replay writes again."""
    metadata = load_training(run, step)
    if metadata is None:
        return None
    from amaris_cli import artifacts

    made = artifacts.derivation(run, step, TRAINING)
    if made is None:
        return SentTraining(metadata, {})
    return SentTraining(metadata, dict(made.inputs), made.how)


def write_training(run: RunDir, step: int, sent: SentTraining, how: How | None = None) -> None:
    from amaris_cli import artifacts

    artifacts.write_json_recorded(run, step, TRAINING, sent.metadata.given(), sent.source, sent.how or how)
