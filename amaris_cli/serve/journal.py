"""The journal of a served step: `RUN/.serve/step-NNNNNN.jsonl`.

While a step is open, `amaris serve` appends every judged rollout here (the rollout as it will be
stored and its score record) the moment it is judged, before the trainer gets the answer. The step's
real files (rollouts.jsonl, scores.jsonl, provenance.json) are written whole on /complete, by the
same stage functions `amaris score` uses, from the journal's records, so they are what `score` writes
for the same rollouts in the same order. A server stopped or killed mid-step finds its journal on
restart and goes on from there.

Lines: an `open` header (how the step is scored, and what the request that opened it said about
training), then `score` entries in the order the rollouts were first judged (a rollout judged again
after a failure keeps its place and takes the new record), a `shard` line for each process of several
whose /complete came, and a `complete` line once the step's files are being written. The journal is removed when the step's
evolution is done. A line torn by a killed writer is cut when the journal is read again.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from amaris_cli.errors import AmarisError
from amaris_cli.jsonio import append_line
from amaris_cli.models import Rollout, ScoreRecord
from amaris_cli.rundir import RunDir
from amaris_cli.training import TrainingMetadata

SERVE_DIR = ".serve"
_NAME = re.compile(r"step-(\d{6,})\.jsonl")


class OpenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["open"] = "open"
    step: int
    mode: Literal["async", "sync"]
    lag: int
    limit: int  # rubric versions <= limit score the step (the version `score --lag` would take)
    # What its records depend on besides rollouts and rubrics (scorer prompt and model, failure policy,
    # training context), as scores.jsonl records them: a restart with other ones may not finish the step.
    scoring: dict[str, Any] | None = None
    training: TrainingMetadata | None = None  # what the request that opened the step said (training.py)
    opened_at: float | None = None  # when (epoch seconds): a restarted trainer tells its own steps from a crash's


class ScoreEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["score"] = "score"
    rollout: Rollout
    record: ScoreRecord


class ShardEntry(BaseModel):
    """Process `shard` of `shards` sent /complete: the step completes once every shard's has come."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["shard"] = "shard"
    shard: int
    shards: int


class CompleteEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["complete"] = "complete"


Entry = Annotated[OpenEntry | ScoreEntry | ShardEntry | CompleteEntry, Field(discriminator="kind")]
_ENTRY = TypeAdapter(Entry)


def serve_dir(run: RunDir) -> Path:
    return run.path / SERVE_DIR


def journal_path(run: RunDir, step: int) -> Path:
    return serve_dir(run) / f"step-{step:06d}.jsonl"


def journaled_steps(run: RunDir) -> list[int]:
    directory = serve_dir(run)
    if not directory.is_dir():
        return []
    return sorted(int(m.group(1)) for p in directory.iterdir() if (m := _NAME.fullmatch(p.name)))


@dataclass
class JournalState:
    header: OpenEntry
    rollouts: dict[str, Rollout] = field(default_factory=dict)
    records: dict[str, ScoreRecord] = field(default_factory=dict)  # in the order rollouts were first judged
    complete: bool = False
    shards: int | None = None
    shards_in: set[int] = field(default_factory=set)

    @property
    def order(self) -> list[str]:
        """The rollouts' ids in journal order: where each goes in rollouts.jsonl (a rollout judged again
        keeps its dict position, so this is the records' key order)."""
        return list(self.records)


class Journal:
    """Appends to one step's journal (the server's event loop is its only writer)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @classmethod
    def create(cls, run: RunDir, header: OpenEntry) -> Journal:
        journal = cls(journal_path(run, header.step))
        journal.path.parent.mkdir(parents=True, exist_ok=True)
        journal.path.unlink(missing_ok=True)
        journal.append(header)
        return journal

    def append(self, entry: OpenEntry | ScoreEntry | ShardEntry | CompleteEntry) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        # One line at a time, whole or not at all (a full disk is cut back and named); a process killed
        # mid-line leaves a torn last line, cut on reading.
        append_line(self._fd, entry.model_dump(mode="json"), self.path)

    def close(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def read_journal(path: Path) -> JournalState:
    """The journal's state; a torn last line is cut off (the file is truncated to its whole lines)."""
    data = path.read_bytes()
    whole = data[: data.rfind(b"\n") + 1]
    lines = whole.splitlines()
    entries = []
    for number, raw in enumerate(lines, start=1):
        try:
            entries.append(_ENTRY.validate_python(orjson.loads(raw)))
        except (orjson.JSONDecodeError, ValidationError) as exc:
            if number == len(lines):  # written whole but not yet valid: treat as torn
                whole = whole[: len(whole) - len(raw) - 1]
                break
            raise AmarisError(f"{path}:{number}: corrupt serve journal ({str(exc).splitlines()[0]}); "
                              "was it edited by hand?") from None
    if len(whole) != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(len(whole))
    if not entries or not isinstance(entries[0], OpenEntry):
        raise AmarisError(f"{path}: a serve journal starts with its `open` line; delete the file to discard it")
    state = JournalState(header=entries[0])
    for entry in entries[1:]:
        if isinstance(entry, ScoreEntry):
            rid = entry.rollout.id
            state.rollouts[rid] = entry.rollout
            state.records[rid] = entry.record
        elif isinstance(entry, ShardEntry):
            state.shards = entry.shards
            state.shards_in.add(entry.shard)
        elif isinstance(entry, CompleteEntry):
            state.complete = True
    return state
