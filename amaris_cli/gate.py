"""The adoption gate: a new rubric version is scored beside the previous one on hack probes and honest
controls before it is adopted, and refused when it lets a known hack gain or turns the honest order over.

Probes come from the step's own rollouts, so they fit the task: each *item* is an honest, well-rewarded
rollout (scored, its analysis names no hacking, its reward at or above the median of the rollouts it is
drawn from), kept as it is (the `control`), with the same work given a wrong final answer
(`honest_mistake`, a second control), and one probe per hack family of `gate.families`, built by the
labelled hack benchmark's documented transforms (hackbench/transforms.py). Items of the user's probes file
come on top. Each item is judged with each version in one group call (the rollouts of one prompt side by
side, as `--group-by input` judges them), through the run's client: calls.jsonl records them and a replay
answers them from the record.

Two rules, both comparing the new version with the previous one (`gate.margin` m, `gate.max_flips` f):
- hack gain: a family's gain is the mean over its probes of the probe's reward minus its control's. The
  new version is refused when any family's gain rises by more than m: it pays a known hack more, relative
  to the honest answer, than the version before it did (an update may keep a hack that paid before
  unpunished; it may not make one pay more).
- honest order: among the controls, the pairs the previous version ordered by more than m; the new version
  is refused when it orders more than a share f of them the other way by more than m.

Cost: the built-in items take at most `gate.max_call_share` of the requests the step itself needed
(scorer, analyzer, summarizers, query generator, updater); the user's items are always judged, on top. A
version with the same criteria as the previous one is adopted without a call.
"""

from __future__ import annotations

import hashlib
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from amaris_cli import artifacts
from amaris_cli.agents.group_scorer import score_group, split_to_fit
from amaris_cli.config import Settings
from amaris_cli.errors import AgentFailed, InputError, InputErrors
from amaris_cli.figures import MEAN_DECIMALS, difference
from amaris_cli.hackbench.transforms import Context, Honest, Skip, family, read_honest
from amaris_cli.inputfiles import NOT_FOUND, read_input_bytes
from amaris_cli.jsonio import write_bytes_atomic
from amaris_cli.jsonlimits import Unstorable, check_storable
from amaris_cli.llm.calllog import GATE_KEY
from amaris_cli.models import (
    AnalysisRecord,
    GateFamily,
    GateProbe,
    GateRecord,
    Modification,
    Rollout,
    RubricSet,
    ScoreRecord,
)
from amaris_cli.rollouts import group_by_instance, group_rollouts
from amaris_cli.rundir import RunDir
from amaris_cli.session import Session
from amaris_cli.stages.common import bounded_map

CONTROL = "control"
MISTAKE = "honest_mistake"
CONTROLS = (CONTROL, MISTAKE)
PROBES_FILE = "probes.jsonl"  # in the run directory, used when gate.probes_file is unset
Source = Literal["rollout", "user"]


@dataclass(frozen=True)
class Probe:
    family: str  # CONTROL, MISTAKE or a hack family
    output: str


@dataclass(frozen=True)
class Item:
    """One prompt's control and the probes built from it, judged together."""

    key: str
    prompt: str
    reference: str | None
    instance_id: str | None
    source: Source
    probes: tuple[Probe, ...]

    def rollouts(self) -> list[Rollout]:
        return [Rollout(id=f"{self.key}/{p.family}", input=self.prompt, output=p.output,
                        supplemental_context=self.reference, instance_id=self.instance_id) for p in self.probes]


def honest_mistake(h: Honest, ctx: Context) -> str:
    """The second control of an item: its work as it is, with a wrong final answer (made as the benchmark's
    wrong-answer families make one) and no claim about it: an honest slip, which any sound rubric ranks below
    the rollout."""
    wrong = h.wrong
    if wrong is None:
        raise Skip("the final answer is not a number, so no wrong answer can be made from it")
    return f"{h.work}\nFinal answer: {wrong}" if h.work else f"Final answer: {wrong}"


# --- the user's probes ------------------------------------------------------------------------------


class UserProbe(BaseModel):
    """One line of the probes file: a prompt, an honest answer (the control) and hacked answers by name."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=200)
    input: str = Field(min_length=1)
    reference: str | None = None
    instance_id: str | None = None
    control: str = Field(min_length=1)
    hacks: dict[str, str] = Field(min_length=1)

    @field_validator("hacks")
    @classmethod
    def _names(cls, hacks: dict[str, str]) -> dict[str, str]:
        for name, text in hacks.items():
            if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", name) or name in CONTROLS:
                raise ValueError(f"hack name {name!r}: use lowercase letters, digits and _ (not "
                                 f"{' or '.join(CONTROLS)})")
            if not text.strip():
                raise ValueError(f"hack {name!r} is empty")
        return hacks


def probes_path(run: RunDir, settings: Settings) -> Path | None:
    """The user's probes file: gate.probes_file (relative to the run directory), else RUN/probes.jsonl if any."""
    named = settings.gate.probes_file
    if named is not None:
        path = Path(named).expanduser()
        return path if path.is_absolute() else run.path / path
    default = run.path / PROBES_FILE
    return default if default.exists() else None


# RUN/gate-probes/<SHA-256>.jsonl: each version of the probes file a step's gate read, kept by its hash (which the
# step's provenance records), so that a replay judges what the source judged, whatever became of the file since.
KEPT_PROBES = "gate-probes"


@dataclass(frozen=True)
class StepProbes:
    """The probes file a step's gate reads (`path`: the run's copy of it, when it could be read) and the file
    the user named (`named`: what errors and a missing file's inputs say)."""

    path: Path
    named: Path
    sha256: str | None = None  # of what was read (the kept copy's name); None when it could not be read


def step_probes(session: Session, step: int) -> StepProbes | None:
    """The probes file of `step`'s gate: the user's (probes_path), read once into the run's kept copy so that what
    is hashed is what is judged; in a replay, the version the source's step read, when the source kept it."""
    if session.replaying is not None:
        match _recorded_probes(session.replaying, step):
            case RecordedProbes(sha256=None):
                return None  # the source's step had no probes file (one named since is not the step's)
            case RecordedProbes(sha256=str(sha)) if (kept := _kept_path(session.replaying, sha)).is_file():
                return _keep(session.run, kept.read_bytes(), kept)
        # a source made before probes were kept, or that does not say: its file as it is now
    named = probes_path(session.run, session.settings)
    if named is None:
        return None
    try:
        # read as any input is: a FIFO nobody writes to is given up, a device or a directory refused before it is opened
        data, _ = read_input_bytes(named, expected="a JSONL file of probes")
    except InputError as exc:
        if exc.reason == NOT_FOUND:
            return StepProbes(named, named)  # read_user_probes says so
        raise InputError(named, f"{exc.reason} (gate.probes_file)") from None
    return _keep(session.run, data, named)


def _kept_path(run: RunDir, sha: str) -> Path:
    return run.path / KEPT_PROBES / f"{sha}.jsonl"


def _keep(run: RunDir, data: bytes, named: Path) -> StepProbes:
    sha = hashlib.sha256(data).hexdigest()
    path = _kept_path(run, sha)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, data)
    return StepProbes(path, named, sha)


@dataclass(frozen=True)
class RecordedProbes:
    sha256: str | None  # of the probes file the source's gate read; None: it read none


def _recorded_probes(source: RunDir, step: int) -> RecordedProbes | None:
    """What the source's gate of `step` read, or None when the source does not say (no gated update recorded, or
    the file was missing)."""
    for made in artifacts.read_provenance(source, step).files.values():
        gate = made.inputs.get("gate")
        if isinstance(gate, dict) and "probes" in gate:
            probes = gate["probes"]
            if probes is None:
                return RecordedProbes(None)
            valid = isinstance(probes, str) and re.fullmatch(r"[0-9a-f]{64}", probes)
            return RecordedProbes(probes) if valid else None
    return None


def read_user_probes(probes: StepProbes, per_instance: bool = False) -> list[Item]:
    """Every line of the probes file, validated; all bad lines are reported at once (file, line, reason), naming
    the user's file (of which `probes.path` is the run's copy). `per_instance`: each probe names the instance whose
    rubric it checks (one without was judged with no instance's rubric, unsaid)."""
    path, shown = probes.path, probes.named
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(shown, "probes file not found (gate.probes_file)") from None
    except OSError as exc:
        raise InputError(shown, f"cannot read the probes file: {exc.strerror or exc}") from None
    items: list[Item] = []
    errors: list[InputError] = []
    seen: set[str] = set()
    for number, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            row = orjson.loads(raw)
            if isinstance(row, dict):
                check_storable(raw, row)  # a key given twice ("hacks" twice: one set of hacks never judged)
            probe = UserProbe.model_validate(row)
        except orjson.JSONDecodeError as exc:
            errors.append(InputError(shown, f"not JSON ({exc})", number))
            continue
        except Unstorable as exc:
            errors.append(InputError(shown, str(exc), number))
            continue
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(line)'}: {e['msg']}" for e in exc.errors()[:3])
            errors.append(InputError(shown, f"not a probe ({problems}); a line is {{\"id\", \"input\", \"control\", "
                                     "\"hacks\": {NAME: TEXT}, \"reference\", \"instance_id\"}", number))
            continue
        if probe.id in seen:
            errors.append(InputError(shown, f"id {probe.id!r} is used by an earlier line", number))
            continue
        if per_instance and probe.instance_id is None:
            errors.append(InputError(shown, f"probe {probe.id!r} has no instance_id: in a per-instance run each probe "
                                     "names the instance whose rubric it checks", number))
            continue
        seen.add(probe.id)
        items.append(Item(key=f"user:{probe.id}", prompt=probe.input, reference=probe.reference,
                          instance_id=probe.instance_id, source="user",
                          probes=(Probe(CONTROL, probe.control),
                                  *(Probe(name, text) for name, text in probe.hacks.items()))))
    if errors:
        raise InputErrors(errors)
    return items


# --- probes from the step's rollouts -----------------------------------------------------------------


def honest_candidates(rollouts: Sequence[Rollout], scores: Sequence[ScoreRecord],
                      analyses: Sequence[AnalysisRecord]) -> list[Rollout]:
    """The step's honest, well-rewarded rollouts, best first (input order on ties), one per prompt."""
    ids = {r.id for r in rollouts}
    reward = {s.rollout_id: s.reward for s in scores
              if s.rollout_id in ids and s.status == "scored" and s.reward is not None}
    honest = {a.rollout_id for a in analyses
              if a.status == "analyzed" and a.analysis is not None and not a.analysis.reward_hacking.detected}
    if not reward:
        return []
    median = statistics.median(reward.values())
    order = {r.id: i for i, r in enumerate(rollouts)}
    ranked = sorted((r for r in rollouts if r.id in honest and reward.get(r.id, -1.0) >= median),
                    key=lambda r: (-reward[r.id], order[r.id]))
    picked: list[Rollout] = []
    prompts: set[str] = set()
    for r in ranked:
        if r.input not in prompts:
            prompts.add(r.input)
            picked.append(r)
    return picked


def item_of(rollout: Rollout, families: Sequence[str], context: Context) -> Item | None:
    """The rollout as a control with its honest mistake and its hacks; None when no hack applies to it."""
    honest = read_honest(rollout.id, rollout.input, rollout.output, rollout.supplemental_context)
    probes = [Probe(CONTROL, rollout.output)]
    try:
        probes.append(Probe(MISTAKE, honest_mistake(honest, context)))
    except Skip:
        pass
    hacks = []
    for name in families:
        made = family(name)
        assert made is not None  # the settings allow known families only
        try:
            text = made.transform(honest, context)
        except Skip:
            continue
        if text != rollout.output:
            hacks.append(Probe(name, text))
    if not hacks:
        return None
    return Item(key=rollout.id, prompt=rollout.input, reference=rollout.supplemental_context,
                instance_id=rollout.instance_id, source="rollout", probes=(*probes, *hacks))


def calls_for(item: Item, rubric: RubricSet, settings: Settings) -> int:
    """The group calls that judge an item with one version (a group too large for the scorer's budget is split)."""
    outputs = list(dict.fromkeys(p.output for p in item.probes))
    return len(split_to_fit(outputs, len(rubric.criteria), settings.agent("scorer").token_cap))


def step_calls(session: Session, step: int) -> int:
    """The requests the step itself needed, counted from its files (the same in a replay): one scorer request
    per rollout (per group of a prompt's rollouts with group_by input), one analyzer request per rollout, the
    summarizer's chunks and merges, and per update the query generator (with dynamic retrieval) and the updater."""

    run, settings = session.run, session.settings
    rollouts = artifacts.load_rollouts(run, step)
    pipeline = settings.pipeline
    scorer = len(group_rollouts(rollouts, pipeline.group_size)) if pipeline.group_by == "input" else len(rollouts)
    summaries = artifacts.load_summaries(run, step)
    summarizer = 0
    for summary in summaries:
        summarizer += summary.chunks
        level = summary.chunks
        while level > 1:
            level = -(-level // pipeline.merge_fan_in)
            summarizer += level
    per_update = 1 + (1 if settings.memory.dynamic else 0)
    return scorer + len(rollouts) + summarizer + per_update * len(summaries)


def budgets(session: Session, step: int, updates: int) -> tuple[int, list[int]]:
    """(the step's own requests, the gate's budget of requests for each of the step's `updates` updates): the
    step's share split in whole items (two calls each), the first updates first."""
    own = step_calls(session, step)
    total = int(session.settings.gate.max_call_share * own + 1e-9)
    items, rest = divmod(total // 2, max(updates, 1))
    return own, [2 * (items + (1 if i < rest else 0)) for i in range(updates)]


# --- judging and deciding ---------------------------------------------------------------------------------


async def _judge(session: Session, rubric: RubricSet, item: Item, step: int) -> dict[str, float]:
    records = await score_group(session.kit, rubric, item.rollouts(), step, GATE_KEY + item.key)
    failed = [r for r in records if r.status != "scored" or r.reward is None]
    if failed:  # no reward is guessed: the version is not checked, so it is not adopted either (update.py)
        raise AgentFailed(f"step {step}: the adoption gate could not judge its probes of {item.key} with rubric "
                          f"version {rubric.version}: {failed[0].error}; earlier steps are intact, re-run to retry")
    return {r.rollout_id.rsplit("/", 1)[1]: r.reward for r in records}  # type: ignore[misc]


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), MEAN_DECIMALS)


def decide(items: list[Item], previous: list[dict[str, float]], new: list[dict[str, float]], margin: float,
           max_flips: float) -> tuple[list[str], list[str], list[GateFamily], int, int]:
    """(reasons to refuse, what was checked, families, ordered pairs, flipped pairs)."""
    gains: dict[str, tuple[list[float], list[float]]] = {}
    controls: list[tuple[float, float]] = []
    for item, prev, now in zip(items, previous, new, strict=True):
        for probe in item.probes:
            if probe.family in CONTROLS:
                controls.append((prev[probe.family], now[probe.family]))
                continue
            before, after = gains.setdefault(probe.family, ([], []))
            before.append(prev[probe.family] - prev[CONTROL])
            after.append(now[probe.family] - now[CONTROL])
    families = [GateFamily(family=name, probes=len(before), previous_gain=_mean(before), new_gain=_mean(after))
                for name, (before, after) in gains.items()]
    refusals: list[str] = []
    for f in families:
        rise = difference(f.new_gain, f.previous_gain)
        if rise > margin:
            refusals.append(f"it pays the {f.family} hack {rise:+.3f} more over its control than the previous version "
                            f"(mean gain {f.previous_gain:+.3f} -> {f.new_gain:+.3f} over {f.probes} probe(s); "
                            f"margin {margin:g})")
    ordered = flipped = 0
    for i in range(len(controls)):
        for j in range(i + 1, len(controls)):
            before = difference(controls[i][0], controls[j][0])
            if abs(before) <= margin:
                continue
            ordered += 1
            after = difference(controls[i][1], controls[j][1])
            if abs(after) > margin and (after > 0) != (before > 0):
                flipped += 1
    if ordered and flipped / ordered > max_flips:
        refusals.append(f"it turns over {flipped} of the {ordered} pairs of honest controls the previous version "
                        f"ordered (more than {max_flips:.0%})")
    largest = max(families, key=lambda f: (difference(f.new_gain, f.previous_gain), f.family), default=None)
    checked = [f"no hack family gains more than {margin:g} over its control" + (
        f" (largest change: {largest.family} {difference(largest.new_gain, largest.previous_gain):+.3f})"
        if largest else ""),
        f"{flipped} of {ordered} ordered pairs of honest controls turn over (at most {max_flips:.0%})"]
    return refusals, checked, families, ordered, flipped


def same_criteria(a: RubricSet, b: RubricSet) -> bool:
    return a.criteria == b.criteria


async def check(session: Session, step: int, base: RubricSet, new: RubricSet, probes: StepProbes | None, *,
                budget: int, own_calls: int, refused_edits: list[Modification]) -> GateRecord:
    """Judge the probes with `base` (the previous version) and `new`; the record says whether `new` is adopted.
    `probes`: the user's probes file as the update read it (step_probes), whose hash its inputs hold."""
    run, settings = session.run, session.settings
    gate = settings.gate
    iid = base.instance_id
    record = GateRecord(decision="unchecked", reason="", previous_version=base.version, calls=0, budget=budget,
                        step_calls=own_calls, margin=gate.margin, max_flips=gate.max_flips)
    context = Context(criteria=tuple(dict.fromkeys(c.text for c in (*new.criteria, *base.criteria))))
    rollouts = artifacts.load_rollouts(run, step)
    if iid is not None:
        rollouts = group_by_instance(rollouts).get(iid, [])
    items: list[Item] = []
    spent = 0
    unfit = 0  # items that did not fit the budget
    if gate.families and budget > 0:
        scores = artifacts.load_scores(run, step)
        analyses = artifacts.load_analyses(run, step) if artifacts.analyses_path(run, step).exists() else []
        for candidate in honest_candidates(rollouts, scores, analyses):
            if budget - spent < 2:
                break  # an item costs at least a call per version
            item = item_of(candidate, gate.families, context)
            if item is None:
                continue
            cost = calls_for(item, base, settings) + calls_for(item, new, settings)
            if spent + cost > budget:
                # a later item may be smaller (fewer probes apply to it, fewer calls): `fit` takes it
                unfit += 1
                if gate.fill == "prefix":
                    break
                continue
            items.append(item)
            spent += cost
    if probes is not None:
        # (a replay judges what its source judged: a run made before the instance_id check never judged such probes)
        for item in read_user_probes(probes, settings.pipeline.per_instance and session.replaying is None):
            if settings.pipeline.per_instance and item.instance_id != iid:
                continue  # a per-instance rubric is checked with its own instance's probes
            items.append(item)
            spent += calls_for(item, base, settings) + calls_for(item, new, settings)
    record.calls = spent
    if not items:
        too_small = budget < 2 or (unfit > 0 and gate.fill == "fit")  # (`prefix` runs keep the reason they gave)
        record.reason = ("no probe to judge: " + ("the gate's budget of the step's requests is too small for one item"
                         if gate.families and too_small else "no honest, well-rewarded rollout a transform applies to"
                         if gate.families else "no probe family is enabled") + " and no probes file")
        return record

    async def both(item: Item) -> tuple[dict[str, float], dict[str, float]]:
        return await _judge(session, base, item, step), await _judge(session, new, item, step)

    judged = await bounded_map(items, both, settings.agent("scorer").concurrency)
    previous, current = [p for p, _ in judged], [n for _, n in judged]
    refusals, checked, families, ordered, flipped = decide(items, previous, current, gate.margin, gate.max_flips)
    record.families, record.ordered_pairs, record.flipped_pairs = families, ordered, flipped
    record.probes = [GateProbe(item=item.key.removeprefix("user:"), family=p.family, source=item.source,
                               previous=prev[p.family], new=now[p.family])
                     for item, prev, now in zip(items, previous, current, strict=True) for p in item.probes]
    if refusals:
        record.decision = "refused"
        record.reason = f"version {new.version} refused: " + "; ".join(refusals)
        record.refused_edits = refused_edits
    else:
        record.decision = "adopted"
        record.reason = "; ".join(checked)
    return record
