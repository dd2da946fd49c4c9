"""A run directory as every reader sees it: `inspect`, `compare`, `report`, `rewards` and `amaris serve`'s
status read a run through one `RunReader`, so each record is loaded once per command and each figure is
computed once (figures.py) and shown the same everywhere.

    reader = RunReader(RunDir("runs/x"))
    reader.overview(3).rewards.mean      # the step's mean reward, as `score` reported it
    reader.rewards_rows(3)               # what `amaris rewards` exports

A reader takes no lock and writes nothing: it works while other processes write the run, and on a
read-only copy of it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, cached_property, lru_cache
from typing import Any

from pydantic import BaseModel

from amaris_cli import artifacts
from amaris_cli.config import Settings, validate_settings
from amaris_cli.errors import InputError
from amaris_cli.figures import RewardFigures, VersionFlips, flip_figures, hacking_figures, reward_figures
from amaris_cli.jsonio import iter_jsonl
from amaris_cli.llm.calllog import usage_row
from amaris_cli.models import (
    Deactivated,
    GateRecord,
    HackingCount,
    Modification,
    RejectedModification,
    ReliabilityRecord,
    Rollout,
    ScoreRecord,
    SummaryRecord,
    UpdateRecord,
)
from amaris_cli.reliability import PooledFlips, StepFlips, load_reliability, step_figures
from amaris_cli.rundir import Manifest, RunDir
from amaris_cli.schedule import spans
from amaris_cli.serve.journal import journal_path
from amaris_cli.serve.validation import load_validation, validation_steps
from amaris_cli.stability import update_edits

USAGE_KEYS = ("calls", "model_calls", "replayed", "prompt_tokens", "completion_tokens", "recorded_prompt_tokens",
              "recorded_completion_tokens", "cost")
UsageTable = dict[str, dict[str, dict[str, float]]]  # {step: {agent: {key: value}}}
RUN_USAGE = "run"  # the usage table's key of calls made for no step (the judge's scale check)


class StepOverview(BaseModel):
    """One step as the readers list it."""

    step: int
    state: str  # artifacts.step_state: new, scored, evolved, updated, failed, running
    rubric_versions: list[int]
    rewards: RewardFigures
    analyzed: int
    hacking: list[HackingCount]
    summarized: bool
    summary: str | None  # the global summary's executive summary
    updates: int  # update records of the step (one per instance in per-instance mode)
    strategies: dict[str, int] = {}  # the strategies of those updates, how many chose each
    strategy: str | None
    rationale: str | None
    applied: list[Modification]  # the edits of the step's updates (every instance's, in per-instance mode)
    # for each of them, whether it changed the rubric (stability.py: a reweight to the weight the criterion has, or a
    # modify that restates it, is applied and changes nothing, so it is no edit)
    applied_changes: list[bool] = []
    rejected: list[RejectedModification]
    deactivated: list[Deactivated]
    gate: GateRecord | None = None  # the adoption gate's check of the update (gate.py)
    refused_by_gate: int = 0  # the step's updates the gate refused (in per-instance mode, each instance's)


class ValidationOverview(BaseModel):
    """A step's validation rollouts (serve's /validate): judged with the rubric versions its training rollouts
    get, in no step, so their figures are shown apart from the step's."""

    step: int
    rubric_versions: list[int]
    rewards: RewardFigures


class StepReliability(BaseModel):
    """A step's judge reliability check as the readers show it: its calls within the budget (or why it was not
    measured or checked) and the flip rates of the versions that scored it, over the steps up to it."""

    measured: bool
    why: str | None = None  # not measured: why
    skipped: str | None = None  # measured but nothing asked again: why
    scorer_calls: int = 0
    max_extra: float | None = None
    budget: int = 0
    calls: int = 0
    failed: int = 0
    versions: list[VersionFlips] = []


class RunReader:
    def __init__(self, run: RunDir) -> None:
        run.require()
        self.run = run
        # Loaders cached per reader: each file is read once per command, however many views use it.
        self.scores = cache(self._scores)
        # A step's analyses are held while it is read (the report shows them beside its figures), not for the whole
        # run: the readers' figure of them, how many were analyzed, is kept instead (a run's analyses held whole took
        # 40 MB at 300 steps of 32 rollouts, and grew with the run).
        self.analyses = lru_cache(maxsize=1)(lambda step: artifacts.load_analyses(self.run, step))
        self.analyzed = cache(lambda step: sum(a.status == "analyzed" for a in self.analyses(step)))
        self.summaries = cache(lambda step: artifacts.load_summaries(self.run, step))
        self.update = cache(lambda step, instance_id=None: artifacts.load_update(self.run, step, instance_id))
        self.retrieval = cache(lambda step, instance_id=None: artifacts.load_retrieval(self.run, step, instance_id))
        self.reliability: Callable[[int], ReliabilityRecord | None] = cache(lambda step: load_reliability(self.run, step))
        self._pooled_flips = PooledFlips()  # step_flip_rates of step after step pool each record once

    @cached_property
    def manifest(self) -> Manifest:
        return self.run.load_manifest()

    @cached_property
    def settings(self) -> Settings:
        return validate_settings(self.manifest.config, str(self.run.manifest_path))

    @cached_property
    def steps(self) -> list[int]:
        return artifacts.step_numbers(self.run)

    def _scores(self, step: int, name: str = artifacts.SCORES) -> list[ScoreRecord]:
        return artifacts.load_scores(self.run, step, name)

    def rollouts(self, step: int) -> list[Rollout]:
        """The step's stored rollouts ([] when a step was scored from elsewhere or is not yet stored)."""
        try:
            return artifacts.load_rollouts(self.run, step)
        except InputError:
            return []

    def scoring_rubrics(self, step: int) -> list[tuple[str | None, int]]:
        """The rubrics that scored the step, as (instance, version): in a per-instance run an instance's own
        rubric where it has one, else the global rubric of that version."""
        keys = {(i if i is not None and self.run.rubric_path(v, i).exists() else None, v)
                for i, v in {(s.instance_id, s.rubric_version) for s in self.scores(step)}}
        return sorted(keys, key=lambda k: (k[0] or "", k[1]))

    def summary(self, step: int, instance_id: str | None = None) -> SummaryRecord | None:
        return next((s for s in self.summaries(step) if s.instance_id == instance_id), None)

    def require_step(self, step: int) -> None:
        if step in self.steps:
            return
        journal = journal_path(self.run, step)
        if journal.exists():  # open in `amaris serve`: its files are written when it completes
            raise InputError(journal, f"step {step} is open in `amaris serve`: its rollouts are in this journal "
                             "and its files are written once the step completes (POST /complete)")
        have = f"the run has steps {describe_steps(self.steps)}" if self.steps else "the run has no steps yet"
        if step in self.validation_steps:  # a trainer's evaluation named it, in no step
            have += (f"; step {step} has validation rollouts only (POST /validate), which `amaris inspect "
                     f"{self.run.path}` lists")
        raise InputError(self.run.path / "steps", f"step {step} does not exist; {have}")

    # --- figures -----------------------------------------------------------------------------------
    def rewards(self, step: int) -> RewardFigures:
        return reward_figures(self.scores(step))

    def step_updates(self, step: int) -> list[UpdateRecord]:
        """Every update of the step, each once: the global one, and one per instance in per-instance mode (whose edits
        were shown as none: no update, no edit, while every instance's rubric changed)."""
        instance_ids = dict.fromkeys([None, *(s.instance_id for s in self.summaries(step))])
        return [u for iid in instance_ids if (u := self.update(step, iid)) is not None]

    def overview(self, step: int) -> StepOverview:
        scores = self.scores(step)
        summaries: list[SummaryRecord] = self.summaries(step)
        update: UpdateRecord | None = self.update(step, None)
        global_summary = self.summary(step)
        updates = self.step_updates(step)
        strategies: dict[str, int] = {}
        for u in updates:
            strategies[u.strategy] = strategies.get(u.strategy, 0) + 1
        return StepOverview(
            step=step, state=artifacts.step_state(self.run, step),
            rubric_versions=sorted({s.rubric_version for s in scores}), rewards=reward_figures(scores),
            analyzed=self.analyzed(step), hacking=hacking_figures(summaries),
            summarized=bool(summaries), summary=global_summary.summary.executive_summary if global_summary else None,
            updates=len(updates), strategies=dict(sorted(strategies.items())),
            strategy=update.strategy if update else None, rationale=update.rationale if update else None,
            applied=[m for u in updates for m in u.applied],
            applied_changes=[c for u in updates for c in update_edits(self.run, u)],
            rejected=[r for u in updates for r in u.rejected],
            deactivated=[d for u in updates for d in u.deactivated], gate=update.gate if update else None,
            refused_by_gate=sum(u.gate is not None and u.gate.decision == "refused" for u in updates))

    @cached_property
    def validation_steps(self) -> list[int]:
        return validation_steps(self.run)

    def validation(self, step: int) -> ValidationOverview | None:
        """The step's validation figures (None when no validation rollout names the step)."""
        records = [entry.record for entry in load_validation(self.run, step)]
        if not records:
            return None
        return ValidationOverview(step=step, rubric_versions=sorted({r.rubric_version for r in records}),
                                  rewards=reward_figures(records))

    def flip_rates(self) -> list[VersionFlips]:
        """Each criterion's flip rate per rubric version, over every step of the run (reliability.py)."""
        return flip_figures(r for r in map(self.reliability, self.steps) if r is not None)

    def step_flip_rates(self, step: int) -> StepFlips:
        """The flip rates of the versions that scored the step, over the steps up to it: what its updater was given."""
        return step_figures(self.reliability, self.steps, step, pooled=self._pooled_flips)

    def step_reliability(self, step: int) -> StepReliability:
        record = self.reliability(step)
        if record is None:
            return StepReliability(measured=False, why="reliability.enabled is off" if not self.settings.reliability.enabled
                                   else "the step's evolution has not checked it yet")
        return StepReliability(measured=True, skipped=record.skipped, scorer_calls=record.scorer_calls,
                               max_extra=record.max_extra, budget=record.budget, calls=record.calls,
                               failed=sum(j.status == "failed" for j in record.judgements),
                               versions=self.step_flip_rates(step).figures)

    def memory_entries(self) -> dict[str, int]:
        """What the memory holds of the run, by record type (its files are the source of truth): in a per-instance
        run every instance's summary and update, as the memory indexes them (memory/service.py, RunCatalog)."""
        counts = {"analysis": 0, "summary": 0, "update": 0}
        for step in self.steps:
            counts["analysis"] += self.analyzed(step)
            for summary in self.summaries(step):
                counts["summary"] += 1
                counts["update"] += self.update(step, summary.instance_id) is not None
        return counts

    # --- calls --------------------------------------------------------------------------------------
    @cached_property
    def usage(self) -> UsageTable:
        """{step (or "run": calls of no step): {agent: {calls, model_calls, replayed, prompt_tokens,
        completion_tokens, recorded_prompt_tokens, recorded_completion_tokens, cost}}} from calls.jsonl.

        Tokens and cost count only calls sent to a model (`source` "model", or no source in older runs);
        calls answered from a record (`source` "replay", "cache", ...) spent nothing and are counted apart."""
        table: UsageTable = {}
        for call in iter_jsonl(self.run.calls_path):
            step = call.get("step")
            row = table.setdefault(RUN_USAGE if step is None else str(step), {}).setdefault(
                usage_row(call["agent"], call.get("context") or ""), dict.fromkeys(USAGE_KEYS, 0))
            usage = call.get("usage") or {}
            prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
            row["calls"] += 1
            if call.get("source", "model") != "model":
                row["replayed"] += 1
                row["recorded_prompt_tokens"] += prompt
                row["recorded_completion_tokens"] += completion
                continue
            row["model_calls"] += 1
            row["prompt_tokens"] += prompt
            row["completion_tokens"] += completion
            price = self.settings.prices.get(call.get("model", ""))
            if price is not None:
                row["cost"] += (prompt * price.prompt + completion * price.completion) / 1e6
        return table

    def usage_by_agent(self) -> dict[str, dict[str, float]]:
        return by_agent(self.usage)

    def usage_totals(self) -> dict[str, Any]:
        rows = [r for a in self.usage.values() for r in a.values()]
        return {"model_calls": sum(r["model_calls"] for r in rows), "recorded_calls": sum(r["replayed"] for r in rows),
                "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
                "completion_tokens": sum(r["completion_tokens"] for r in rows),
                "cost": round(sum(r["cost"] for r in rows), 6), "priced_models": self.priced_models}

    @property
    def priced_models(self) -> list[str]:
        """The models the run's settings price (none: costs are not shown)."""
        return sorted(self.settings.prices)

    # --- rewards for the trainer -------------------------------------------------------------------
    def rewards_rows(self, step: int, rescored: bool = False, failed_as: float | None = None) -> list[dict[str, Any]]:
        """`{"id", "reward", "status"}` per rollout in input order: only whole scores of the step's current
        rollouts (a step being scored again, or whose rollouts changed since, is an error, never a mix)."""
        name = artifacts.RESCORES if rescored else artifacts.SCORES
        path = artifacts.scores_path(self.run, step, name)
        fresh = artifacts.freshness(self.run, step, name)
        if fresh.sha is None:
            self.require_step(step)
            made_by = (f"`amaris evolve --run {self.run.path} --step {step} --rescore`" if rescored
                       else f"`amaris score ... --run {self.run.path} --step {step}`")
            if fresh.made is not None and path.exists():
                raise InputError(path, f"step {step}: {name} is not as amaris wrote it (edited by hand, or cut by a "
                                       f"crash): {made_by} writes it again")
            raise InputError(path, f"step {step} has no complete {name}: {made_by} writes it (or is still writing it)")
        if artifacts.ROLLOUTS in fresh.upstream:
            raise InputError(path, f"step {step}: {name} scores other rollouts than the step now holds "
                                   "(it is being scored again, or its rollouts were replaced)")
        by_id = {r.rollout_id: r for r in self.scores(step, name)}
        rows: list[dict[str, Any]] = []
        for rollout in artifacts.load_rollouts(self.run, step):
            record = by_id.get(rollout.id)
            if record is None:
                raise InputError(path, f"rollout {rollout.id!r} has no score")
            reward = record.reward if record.status == "scored" or record.reward is not None else failed_as
            rows.append({"id": rollout.id, "reward": reward, "status": record.status})
        return rows


def by_agent(usage: UsageTable) -> dict[str, dict[str, float]]:
    """A usage table summed over steps: {agent: {key: total}}."""
    agents: dict[str, dict[str, float]] = {}
    for per_agent in usage.values():
        for agent, row in per_agent.items():
            total = agents.setdefault(agent, dict.fromkeys(USAGE_KEYS, 0))
            for key, value in row.items():
                total[key] += value
    return dict(sorted(agents.items()))


def describe_steps(steps: list[int]) -> str:
    """0-5, 8, 10-12: runs of consecutive steps as ranges."""
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans(steps))

