"""The run's artifacts: where each step file lives, how it is read back, and what it was derived from.

Every step file is derived from others:

    rollouts.jsonl + rubric version(s) ........ scores.jsonl (and rescores.jsonl)
    scores.jsonl + rollouts ................... analyses.jsonl
    scores.jsonl + analyses.jsonl ............. stats.json, summary.json (+ summary.chunk-NNN.json)
    summary + rubric + earlier steps + memory . retrieval.json, update.json, rubrics/step-(t+1).json

`steps/NNNNNN/provenance.json` records, for each derived file, the inputs it was computed from (the
digests of upstream files, the rubric versions, the prompt templates and the config keys it depends
on), a digest of those inputs, and the SHA-256 of the file as written. A stage reuses a file only when
the digest of its current inputs equals the recorded one and the file still has the recorded bytes;
otherwise it recomputes it (requests that did not change are answered from calls.jsonl, so only what
changed costs a model call). `freshness` is that rule, the only one: every stage and reader asks it. The same file marks a step's evolution as complete, which is what
`evolve` of a later step and `score --lag` wait for.

Writers of a step hold its step lock (locks.py), so the read-modify-write of provenance.json is safe; while held,
the writer keeps it in memory and writes it in batches (`held`).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from amaris_cli.errors import AmarisError, InputError
from amaris_cli.filehashes import RunHashes, file_sha256, run_hashes
from amaris_cli.jsonio import dumps_line, load_per_rollout, read_model, write_json_atomic, write_jsonl_atomic
from amaris_cli.models import (
    AnalysisRecord,
    RetrievalRecord,
    Rollout,
    ScoreRecord,
    StepStats,
    SummaryRecord,
    UpdateRecord,
)
from amaris_cli.rundir import RunDir, numbered

ROLLOUTS = "rollouts.jsonl"
SCORES = "scores.jsonl"
RESCORES = "rescores.jsonl"
ANALYSES = "analyses.jsonl"
STATS = "stats.json"
SUMMARY = "summary.json"
RETRIEVAL = "retrieval.json"
UPDATE = "update.json"
PROVENANCE = "provenance.json"


# --- paths ------------------------------------------------------------------------------------


def rel(run: RunDir, name: str, instance_id: str | None = None) -> str:
    """A step file's name relative to its step directory (per-instance files live under instances/, in the
    directory the run keeps the instance under: RunDir.instance_dir)."""
    return name if instance_id is None else f"instances/{run.instance_dir(instance_id)}/{name}"


def step_file(run: RunDir, step: int, name: str, instance_id: str | None = None) -> Path:
    return run.step_dir(step) / rel(run, name, instance_id)


def rollouts_path(run: RunDir, step: int) -> Path:
    return step_file(run, step, ROLLOUTS)


def scores_path(run: RunDir, step: int, output: str = SCORES) -> Path:
    return step_file(run, step, output)


def analyses_path(run: RunDir, step: int) -> Path:
    return step_file(run, step, ANALYSES)


def summary_path(run: RunDir, step: int, instance_id: str | None = None) -> Path:
    return step_file(run, step, SUMMARY, instance_id)


def chunk_name(index: int) -> str:
    return f"summary.chunk-{index:03d}.json"


def chunk_path(run: RunDir, step: int, index: int, instance_id: str | None = None) -> Path:
    return step_file(run, step, chunk_name(index), instance_id)


def stats_path(run: RunDir, step: int, instance_id: str | None = None) -> Path:
    return step_file(run, step, STATS, instance_id)


def retrieval_path(run: RunDir, step: int, instance_id: str | None = None) -> Path:
    return step_file(run, step, RETRIEVAL, instance_id)


def update_path(run: RunDir, step: int, instance_id: str | None = None) -> Path:
    return step_file(run, step, UPDATE, instance_id)


def provenance_path(run: RunDir, step: int) -> Path:
    return run.step_dir(step) / PROVENANCE


def step_numbers(run: RunDir) -> list[int]:
    base = run.path / "steps"
    if not base.is_dir():
        return []
    return sorted(n for p in base.iterdir() if (n := numbered(p.name)) is not None and p.is_dir())


def stored_empty(run: RunDir, step: int) -> bool:
    """Whether the step is stored with no rollouts (`amaris serve`'s POST /outage: none of its batch reached the
    server). Told by the file's size, not by reading it: every evolution asks, and a step may hold 10,000."""
    path = rollouts_path(run, step)
    return path.exists() and path.stat().st_size == 0


def steps_with_rollouts(run: RunDir) -> list[int]:
    return [s for s in step_numbers(run) if rollouts_path(run, s).exists()]


# --- reading records back -----------------------------------------------------------------------


def load_rollouts(run: RunDir, step: int) -> list[Rollout]:
    path = rollouts_path(run, step)
    if not path.exists():
        raise InputError(path, f"step {step} has no rollouts yet; run `amaris score ROLLOUTS.jsonl --run {run.path} "
                               f"--step {step}` first")
    return load_per_rollout(path, Rollout, lambda r: r.id)


def load_scores(run: RunDir, step: int, output: str = SCORES) -> list[ScoreRecord]:
    return load_per_rollout(scores_path(run, step, output), ScoreRecord, lambda r: r.rollout_id)


def load_analyses(run: RunDir, step: int) -> list[AnalysisRecord]:
    return load_per_rollout(analyses_path(run, step), AnalysisRecord, lambda r: r.rollout_id)


def load_stats(run: RunDir, step: int, instance_id: str | None = None) -> StepStats | None:
    path = stats_path(run, step, instance_id)
    return read_model(path, StepStats) if path.exists() else None


def load_summary(run: RunDir, step: int, instance_id: str | None = None) -> SummaryRecord | None:
    path = summary_path(run, step, instance_id)
    return read_model(path, SummaryRecord) if path.exists() else None


def summary_paths(run: RunDir, step: int) -> list[Path]:
    """The step's global summary and every instance's (per-instance mode)."""
    paths = [summary_path(run, step), *sorted((run.step_dir(step) / "instances").glob(f"*/{SUMMARY}"))]
    return [p for p in paths if p.exists()]


def load_summaries(run: RunDir, step: int) -> list[SummaryRecord]:
    return [read_model(p, SummaryRecord) for p in summary_paths(run, step)]


def load_update(run: RunDir, step: int, instance_id: str | None = None) -> UpdateRecord | None:
    path = update_path(run, step, instance_id)
    return read_model(path, UpdateRecord) if path.exists() else None


def load_retrieval(run: RunDir, step: int, instance_id: str | None = None) -> RetrievalRecord | None:
    path = retrieval_path(run, step, instance_id)
    return read_model(path, RetrievalRecord) if path.exists() else None


# --- provenance -------------------------------------------------------------------------------


class _MadeBy(BaseModel):
    """The command settings a record was made with (what a replay repeats): its config `flags`, its kind of
    `judge`, and the answer-changing agent keys its `environment` set (`None`: recorded before amaris recorded
    them; not written then, so that a replay of such a record writes what its source holds)."""

    model_config = ConfigDict(extra="forbid")
    flags: dict[str, Any] = Field(default_factory=dict)
    judge: str | None = None
    environment: dict[str, dict[str, Any]] | None = None

    @model_serializer(mode="wrap")
    def _environment_when_recorded(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if self.environment is None:
            data.pop("environment", None)
        return data

    @property
    def how(self) -> How:
        """The command settings it was made with (what a replay writes the file with)."""
        return How(flags=self.flags, judge=self.judge, environment=self.environment)


class Derivation(_MadeBy):
    """How one step file was made: from what (`inputs`, and their `digest`), into which bytes (`sha256`),
    and by which command settings (not part of the digest)."""

    inputs: dict[str, Any]
    digest: str
    sha256: str


class Evolution(_MadeBy):
    """The step's evolution (analyze, summarize, and update when due): `done`, or `failed` with the
    error and the command that resumes it, so that later evolutions waiting for it stop instead of waiting in
    vain and name the root cause. `skipped`: done without evaluating the step (policy.py), and why."""

    status: Literal["done", "failed"]
    update: bool = False
    rescore: bool = False
    error: str | None = None
    resume: str | None = None
    skipped: str | None = None


class StepProvenance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    files: dict[str, Derivation] = Field(default_factory=dict)
    evolution: Evolution | None = None


def digest(value: Any) -> str:
    """`sha256:` + the SHA-256 of the canonical JSON of a value (sorted keys, no whitespace)."""
    return "sha256:" + hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def read_provenance(run: RunDir, step: int) -> StepProvenance:
    """The step's provenance: the writer's own while it holds the step (`held`), else the file's. Treat it as
    read-only: writers below replace it whole, so a reader (a memory thread) never sees one half-changed."""
    path = provenance_path(run, step)
    mine = _held_for(path)
    if mine is not None and mine.provenance is not None:
        return mine.provenance
    provenance = read_model(path, StepProvenance) if path.exists() else StepProvenance()
    if mine is not None:
        with _HELD_LOCK:
            if mine.provenance is None:
                mine.provenance = provenance
            return mine.provenance
    return provenance


# How long a record may wait in the writer's memory before provenance.json is rewritten: the file holds every
# file of the step, 2.5 MB at 240 instances, and was rewritten (and read back) once per instance file, most of
# a per-instance step's time. Records are written with the first save this long after the last write, at the end
# of each stage (`flush`: scoring, analyze, summarize, update), with the evolution's mark, and when the hold ends.
# A writer killed in between loses the records made since the last write: a stage run again finds those files
# unrecorded and makes them again (unchanged requests are answered from calls.jsonl).
PROVENANCE_FLUSH_SECONDS = 2.0


@dataclass
class _Held:
    path: Path
    provenance: StepProvenance | None = None  # None: not read yet
    dirty: bool = False
    saved_at: float = 0.0
    depth: int = 1

    def flush(self) -> None:
        if self.dirty and self.provenance is not None:
            write_json_atomic(self.path, self.provenance.model_dump(mode="json"))
            self.dirty = False
        self.saved_at = time.monotonic()


_HELD: dict[str, _Held] = {}  # by provenance.json's real path
_HELD_LOCK = threading.Lock()  # memory threads read provenance too (memory/service.py)


def _held_for(path: Path) -> _Held | None:
    """This process's hold of the provenance at `path` (by its real path: one run may be named two ways)."""
    if not _HELD:  # a reader holds nothing: no path to resolve
        return None
    with _HELD_LOCK:
        return _HELD.get(os.path.realpath(path))


@contextmanager
def held(run: RunDir, step: int) -> Iterator[None]:
    """While the step's lock is held (its only writer is this process): its provenance is kept in memory and
    written at most every PROVENANCE_FLUSH_SECONDS, at once for an evolution mark (which other processes wait
    for), and when the hold ends (before the lock is released, so the next holder reads every record)."""
    path = provenance_path(run, step)
    key = os.path.realpath(path)
    with _HELD_LOCK:
        mine = _HELD.get(key)
        if mine is None:
            mine = _HELD[key] = _Held(path, saved_at=time.monotonic())
        else:
            mine.depth += 1
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        with _HELD_LOCK:
            mine.depth -= 1
            last = mine.depth == 0
        if last:
            try:
                mine.flush()
            except OSError:
                if not failed:  # else the error the command stops with is the one to report
                    raise
            finally:
                with _HELD_LOCK:
                    del _HELD[key]


def flush(run: RunDir, step: int) -> None:
    """Write the step's held provenance now (nothing when not held): what a writer has finished, other processes
    may read before the hold ends (`amaris serve` holds a complete step while its early analyses settle, and has
    answered /complete: `amaris rewards` of the step must find its scores recorded)."""
    mine = _held_for(provenance_path(run, step))
    if mine is not None:
        mine.flush()


def _save(run: RunDir, step: int, provenance: StepProvenance, *, now: bool = False) -> None:
    """Replace the step's provenance (`now`: on disk at once, also while held)."""
    path = provenance_path(run, step)
    mine = _held_for(path)
    if mine is not None:
        with _HELD_LOCK:
            mine.provenance, mine.dirty = provenance, True
    if mine is None:
        write_json_atomic(path, provenance.model_dump(mode="json"))
    elif now or time.monotonic() - mine.saved_at >= PROVENANCE_FLUSH_SECONDS:
        mine.flush()


def _with(provenance: StepProvenance, files: dict[str, Derivation] | None = None,
          evolution: Evolution | None | Literal["same"] = "same") -> StepProvenance:
    """A new provenance with `files` and/or `evolution` in place (the one read is left as it was)."""
    return StepProvenance.model_construct(files=provenance.files if files is None else files,
                                          evolution=provenance.evolution if evolution == "same" else evolution)


def derivation(run: RunDir, step: int, name: str) -> Derivation | None:
    return read_provenance(run, step).files.get(name)


@dataclass(frozen=True)
class How:
    """The command settings a file was made with (recorded for replay, not part of its digest)."""

    flags: dict[str, Any]
    judge: str | None
    environment: dict[str, dict[str, Any]] | None = None  # None: not recorded (see _MadeBy)

    def recorded(self) -> dict[str, Any]:
        """As the fields of a record (Derivation, Evolution)."""
        return {"flags": dict(self.flags), "judge": self.judge, "environment": self.environment}


def record(run: RunDir, step: int, name: str, inputs: dict[str, Any], how: How | None = None) -> str:
    """Record how `name` was derived, after it was written; returns its SHA-256."""
    return record_many(run, step, [name], inputs, how)[0]


def record_many(run: RunDir, step: int, names: list[str], inputs: dict[str, Any],
                how: How | None = None) -> list[str]:
    """Record how files made from the same inputs were derived, after they were written, in one rewrite of
    provenance.json (which holds every file of the step: a rewrite per file is quadratic in the files, as
    a large step's summary chunks are); returns their SHA-256s."""
    shas = []
    for name in names:
        sha = file_sha256(run.step_dir(step) / name)
        if sha is None:
            raise AmarisError(f"{run.step_dir(step) / name}: cannot record a file that was not written")
        shas.append(sha)
    if not names:
        return shas
    provenance = read_provenance(run, step)
    derived = Derivation(inputs=inputs, digest=digest(inputs), sha256="", **(how.recorded() if how else {}))
    files = dict(provenance.files)
    for name, sha in zip(names, shas, strict=True):
        files[name] = derived.model_copy(update={"sha256": sha})
    _save(run, step, _with(provenance, files))
    return shas


def write_jsonl_recorded(run: RunDir, step: int, name: str, rows: Iterable[Any], inputs: dict[str, Any],
                         how: How | None = None) -> str:
    write_jsonl_atomic(run.step_dir(step) / name, rows)
    return record(run, step, name, inputs, how)


def write_json_recorded(run: RunDir, step: int, name: str, value: Any, inputs: dict[str, Any],
                        how: How | None = None) -> str:
    write_json_atomic(run.step_dir(step) / name, value)
    return record(run, step, name, inputs, how)


def remove(run: RunDir, step: int, name: str) -> None:
    """Delete a step file and what provenance records of it (an output the stage no longer makes)."""
    (run.step_dir(step) / name).unlink(missing_ok=True)
    provenance = read_provenance(run, step)
    if name in provenance.files:
        _save(run, step, _with(provenance, {k: v for k, v in provenance.files.items() if k != name}))


def evolution(run: RunDir, step: int) -> Evolution | None:
    return read_provenance(run, step).evolution


def mark_evolved(run: RunDir, step: int, mark: Evolution) -> None:
    _save(run, step, _with(read_provenance(run, step), evolution=mark), now=True)


def clear_evolved(run: RunDir, step: int) -> None:
    """The step's inputs changed (it is being scored again): its evolution is no longer complete."""
    provenance = read_provenance(run, step)
    if provenance.evolution is not None:
        _save(run, step, _with(provenance, evolution=None), now=True)


UPSTREAM = {"rollouts": ROLLOUTS, "scores": SCORES, "analyses": ANALYSES}
RUBRIC_INPUTS = ("rubrics", "base_rubric")


def rubric_key(version: int, instance_id: str | None) -> str:
    """How a derived file names a rubric it was made with: `INSTANCE@VERSION` (`-` for the run's own)."""
    return f"{instance_id or '-'}@{version}"


def rubric_sha256(run: RunDir, version: int, instance_id: str | None, hashes: RunHashes | None = None) -> str | None:
    """The SHA-256 of the file that holds a rubric: the instance's own version when it has one, else the run's (None:
    neither exists). One stat when the memo knows it: every instance's files name every instance's rubric through
    scores.jsonl, so a step's stale check looks rubrics up a number of times quadratic in its instances (72,000 at
    120 instances: 7 s of a step in path building and stats)."""
    hashes = hashes if hashes is not None else run_hashes(run.path)
    if instance_id is not None and (own := hashes.sha256(run.rubric_path(version, instance_id))) is not None:
        return own
    return hashes.sha256(run.rubric_path(version))


@dataclass(frozen=True)
class Freshness:
    """Whether a recorded step file can be used: `made` is what provenance says it was made from, `whole`
    that the file still has the bytes it was written with, `upstream` what it was made from (an upstream
    step file: rollouts, scores, analyses, the summary; or a rubric file) that has changed since."""

    name: str
    made: Derivation | None
    whole: bool
    upstream: tuple[str, ...]

    @property
    def sha(self) -> str | None:
        """The file's SHA-256 when it is whole."""
        return self.made.sha256 if self.made is not None and self.whole else None

    @property
    def current(self) -> bool:
        """Whole, and made from what the step holds now: a stage may build on it, a reader may show it."""
        return self.whole and not self.upstream

    def holds(self, rows: list[Any]) -> bool:
        """Whole, and exactly `rows` as write_jsonl_recorded writes them (a stage run again with other settings
        that made the same records from the same answers)."""
        return self.sha is not None and self.sha == hashlib.sha256(b"".join(dumps_line(r) for r in rows)).hexdigest()

    def made_from(self, inputs: dict[str, Any]) -> bool:
        """Whole, and derived from exactly `inputs` (which name the upstream files' content): a stage may
        reuse it instead of computing it again."""
        return self.whole and self.made is not None and self.made.digest == digest(inputs)

    def problem(self, step: int) -> str | None:
        """Why a stage must not build on the file, or None."""
        if self.sha is None:
            return f"step {step} has no complete {self.name}"
        if self.upstream:
            return f"step {step}: {self.name} is out of date ({', '.join(self.upstream)} changed since it was written)"
        return None


def freshness(run: RunDir, step: int, name: str, provenance: StepProvenance | None = None,
              shas: dict[str, str | None] | None = None) -> Freshness:
    """The one freshness rule of a step file (`name` relative to the step directory). `provenance` and
    `shas` (the current SHA-256 of the files looked at) are caches for a caller that asks about many files; a file
    not changed since an earlier command hashed it is not read again (filehashes.py)."""
    provenance = provenance if provenance is not None else read_provenance(run, step)
    shas = {} if shas is None else shas
    hashes = run_hashes(run.path)

    def current(key: str, path: Path) -> str | None:
        if key not in shas:
            shas[key] = hashes.sha256(path)
        return shas[key]

    made = provenance.files.get(name)
    if made is None:
        return Freshness(name, None, False, ())
    base = run.step_dir(step)
    whole = current(name, base / name) == made.sha256

    def recorded_whole(file: str) -> str | None:
        entry = provenance.files.get(file)
        return entry.sha256 if entry is not None and current(file, base / file) == entry.sha256 else None

    def rubric_sha(key: str) -> str | None:
        # Looked up before its file is found: every instance's files name its rubric (78,000 paths built for 8 steps
        # of 240 instances, most of the stale check once the hashes were remembered).
        if (cached := f"rubric {key}") not in shas:
            instance, _, version = key.rpartition("@")
            shas[cached] = rubric_sha256(run, int(version), None if instance == "-" else instance, hashes) \
                if version.isdigit() else None
        return shas[cached]

    changed = [upstream for key, upstream in UPSTREAM.items()
               if key in made.inputs and made.inputs[key] != recorded_whole(upstream)]
    summary = made.inputs.get("summary")
    summary_name = name.rsplit("/", 1)[0] + "/" + SUMMARY if "/" in name else SUMMARY
    if summary is not None and summary != recorded_whole(summary_name):
        changed.append(summary_name)
    for key in RUBRIC_INPUTS:
        recorded = made.inputs.get(key)
        if isinstance(recorded, dict):
            changed += [f"rubric {rubric}" for rubric, sha in recorded.items() if rubric_sha(rubric) != sha]
    return Freshness(name, made, whole, tuple(changed))


def stale_files(run: RunDir, step: int, provenance: StepProvenance | None = None,
                among: Collection[str] | None = None) -> list[str]:
    """The step's files that no longer match what they were derived from: edited since written, or made
    from an upstream file (rollouts, scores, analyses, summary) or a rubric that has changed since. `among`:
    only those of these files (each file looked at is read whole for its hash)."""
    provenance = provenance if provenance is not None else read_provenance(run, step)
    shas: dict[str, str | None] = {}
    return [name for name in sorted(provenance.files) if (among is None or name in among)
            and not freshness(run, step, name, provenance, shas).current]


def step_state(run: RunDir, step: int) -> str:
    """One word for where a step stands: running, stale, evolved, updated, skipped, failed, scored or new.
    Stale (a file edited since written, or made from one that changed: `stale_files`) comes before what the
    evolution mark says, so the overview never shows such a step as a finished one."""
    from amaris_cli.locks import holder

    if holder(run.step_lock_path(step)) is not None:
        return "running"
    provenance = read_provenance(run, step)
    if stale_files(run, step, provenance):
        return "stale"
    mark = provenance.evolution
    if mark is not None:
        if mark.status == "failed":
            return "failed"
        return "skipped" if mark.skipped else ("updated" if mark.update else "evolved")
    return "scored" if SCORES in provenance.files else "new"  # every recorded file is whole and current here
