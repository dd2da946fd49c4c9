"""Judge reliability, as the run's files hold it: each step's reliability.json (written by
stages/reliability.py, asked by agents/rejudge.py), the flip rates of each rubric version
(figures.flip_figures) and what the updater is given of them.

A criterion's flip rate is the share of its re-judged verdicts that differ from the first verdict by more
than `reliability.tolerance`; the updater reads a criterion that flips as a candidate to rewrite.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from amaris_cli import artifacts
from amaris_cli.figures import FlipPools, VersionFlips, verdict_flipped
from amaris_cli.jsonio import read_json
from amaris_cli.models import ReliabilityRecord, RubricSet
from amaris_cli.rundir import RunDir
from amaris_cli.terminal import one_line

RELIABILITY = "reliability.json"
EXAMPLES_PER_CRITERION = 2  # flipped verdicts shown to the updater with both reasons
REASON_CHARS = 200


# --- reading the records back ---------------------------------------------------------------------


def load_reliability(run: RunDir, step: int) -> ReliabilityRecord | None:
    """The step's reliability.json when it is current (whole, and made from the scores the step holds now):
    a stale one describes other verdicts and is not shown."""
    found = current_reliability(run, step)
    return found[0] if found is not None else None


def current_reliability(run: RunDir, step: int) -> tuple[ReliabilityRecord, str] | None:
    """load_reliability's record and the SHA-256 of its file (what an update that used it records)."""
    path = artifacts.step_file(run, step, RELIABILITY)
    if not path.exists():
        return None
    fresh = artifacts.freshness(run, step, RELIABILITY)
    if not fresh.current or fresh.sha is None:
        return None
    return ReliabilityRecord.model_validate(read_json(path)), fresh.sha


class StepRecords:
    """The run's current reliability records as one update stage reads them: each step's once, however many of its
    instances' updaters ask (each of 240 instances' read every record from the oldest version on, and the provenance
    of each for its digest)."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self.steps = artifacts.step_numbers(run)
        self._read: dict[int, tuple[ReliabilityRecord, str] | None] = {}

    def found(self, step: int) -> tuple[ReliabilityRecord, str] | None:
        if step not in self._read:
            self._read[step] = current_reliability(self.run, step)
        return self._read[step]

    def record(self, step: int) -> ReliabilityRecord | None:
        found = self.found(step)
        return found[0] if found is not None else None

    def sha(self, step: int) -> str:
        found = self.found(step)
        assert found is not None, f"step {step}: no current reliability record"
        return found[1]


@dataclass(frozen=True)
class StepFlips:
    """The flip rates of the rubric version(s) a step's own re-judgements judged, and the records pooled."""

    figures: list[VersionFlips]
    records: list[ReliabilityRecord]


def step_figures(load: Callable[[int], ReliabilityRecord | None], steps: list[int], step: int,
                 instances: set[str | None] | None = None, pooled: PooledFlips | None = None) -> StepFlips:
    """The flip rates of the rubric version(s) the step's own re-judgements judged (the versions that scored it;
    of the given instances, or of all), pooled over the records of the steps up to it that judged them: what the
    updater of the step is given, and what `inspect --step` and the report's step page show. `load` reads a
    step's current record (a reader passes its cached one). Version v scores no step before v, so only steps
    from the oldest version on are read. `pooled`: the pools of an earlier call, which a later step of the same
    versions goes on from (a reader that asks for every step in order)."""
    own = load(step)
    versions = frozenset((j.rubric_version, j.instance_id) for j in (own.judgements if own else [])
                         if instances is None or j.instance_id in instances)
    if not versions:
        return StepFlips([], [])
    records, pools = (pooled or PooledFlips()).upto(load, steps, step, versions)
    return StepFlips([f for f in pools.figures() if (f.rubric_version, f.instance_id) in versions], records)


class PooledFlips:
    """step_figures' records and pools, kept for the next step of the same versions: the report shows every step's
    flip rates, and pooled the records from the oldest version on again at each, a cost that grew with the square of
    the steps a version scored (a rubric kept for many steps: `--update-every`, a frozen rubric)."""

    def __init__(self) -> None:
        self._versions: frozenset[tuple[int, str | None]] = frozenset()
        self._last = -1  # the last step pooled
        self._records: list[ReliabilityRecord] = []
        self._pools = FlipPools()

    def upto(self, load: Callable[[int], ReliabilityRecord | None], steps: list[int], step: int,
             versions: frozenset[tuple[int, str | None]]) -> tuple[list[ReliabilityRecord], FlipPools]:
        """The records of `steps` (ascending) from the oldest of `versions` to `step` that judged any of them, and
        their pools."""
        if versions != self._versions or step < self._last:
            self._versions, self._records, self._pools = versions, [], FlipPools()
            self._last = min(v for v, _ in versions) - 1
        for s in steps[bisect_right(steps, self._last):bisect_right(steps, step)]:
            record = load(s)
            if record is not None and any((j.rubric_version, j.instance_id) in versions for j in record.judgements):
                self._records.append(record)
                self._pools.add(record)
        self._last = max(self._last, step)
        return list(self._records), self._pools


def judged_rubric(run: RunDir, figure: VersionFlips) -> RubricSet:
    """The rubric whose criteria a figure's re-judgements judged (an instance's own version, else the run's)."""
    instance = figure.instance_id if figure.instance_id is not None and \
        run.rubric_path(figure.rubric_version, figure.instance_id).exists() else None
    return run.load_rubric(figure.rubric_version, instance)


# --- the updater's input --------------------------------------------------------------------------


@dataclass(frozen=True)
class UpdaterReliability:
    block: str  # the text of the updater prompt's RELIABILITY block
    inputs: dict[str, Any]  # what it was made from (the records' SHA-256), for the update's provenance


NOT_MEASURED = "(not measured: no re-judgement of the criteria of this rubric version)"


def updater_reliability(run: RunDir, step: int, base: RubricSet, read: StepRecords | None = None) -> UpdaterReliability:
    """The flip rates the updater of `step` is given: those of the rubric version(s) the step's own
    re-judgements judged (the versions that scored the step; an instance's own, per instance), pooled over
    the steps up to it, for the criteria of `base` (the rubric it edits) whose text and kind are the ones that
    were judged. One JSON line per criterion, with up to EXAMPLES_PER_CRITERION flipped verdicts and the
    judge's two reasons (untrusted text: the prompt puts the whole in a block). `read`: the records an update stage
    shares among its instances' updaters."""
    read = read if read is not None else StepRecords(run)
    flips = step_figures(read.record, read.steps, step, {base.instance_id})
    records = flips.records
    lines = []
    for figure in flips.figures:
        measured = judged_rubric(run, figure)
        for c in figure.criteria:
            judged, current = measured.get(c.criterion_id), base.get(c.criterion_id)
            if judged is None or current is None or (judged.text, judged.kind) != (current.text, current.kind):
                continue  # the criterion was edited or removed since: its flips describe another text
            lines.append({
                "criterion_id": c.criterion_id, "rubric_version": figure.rubric_version, "judged_again": c.n,
                "flipped": c.flips, "flip_rate": c.rate, "repeat": f"{c.repeat.flips} of {c.repeat.n} flipped",
                "permuted": f"{c.permuted.flips} of {c.permuted.n} flipped",
                "tolerance": figure.tolerance[-1] if len(figure.tolerance) == 1 else figure.tolerance,
                "examples": _examples(records, figure, c.criterion_id)})
    digests = {str(r.step): read.sha(r.step) for r in records}
    block = "\n".join(orjson.dumps(line).decode() for line in lines) if lines else NOT_MEASURED
    return UpdaterReliability(block=block, inputs={"reliability": digests} if digests else {})


def _examples(records: list[ReliabilityRecord], figure: VersionFlips, criterion_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for record in records:
        for j in record.judgements:
            if (j.rubric_version, j.instance_id) != (figure.rubric_version, figure.instance_id) or j.status != "judged":
                continue
            for v in j.verdicts:
                if v.criterion_id == criterion_id and verdict_flipped(v.first, v.again, record.tolerance):
                    found.append({"step": record.step, "rollout_id": j.rollout_id, "kind": j.kind, "first": v.first,
                                  "again": v.again, "first_reason": one_line(v.first_reason, REASON_CHARS),
                                  "reason_again": one_line(v.reason, REASON_CHARS)})
                    if len(found) == EXAMPLES_PER_CRITERION:
                        return found
    return found

