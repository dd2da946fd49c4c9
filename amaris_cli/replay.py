"""Exact, cheap replay of a recorded run into a new run directory.

Every request amaris sends is named by its hash (see llm/hashing.py). A replay answers each request
whose hash the source's calls.jsonl already holds with the recorded response: no model call, no cost.
Because prompts render deterministically (content-derived block tags, sorted JSON) and outputs are
written in input order, a replay with unchanged settings reproduces every step and rubric file byte
for byte. Changed settings (an ablation) change some requests: only those go to the model, from the
first point where their inputs differ. `--offline` makes such a miss an error that names the step,
the agent and what differs, and needs no endpoint.

How each step was run comes from the source's provenance (provenance.json of each step): the lag or
rubric version that scored it, whether it was evolved, updated and re-scored, the failure policy, and
the config flags and kind of judge of the commands that ran it. So a run built by `loop` and one built
by a shell script of `score --lag L` and `evolve` commands replay the same way. The source is only
read: no lock is taken on it and nothing in it is written.
"""

from __future__ import annotations

import shutil
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import orjson

from amaris_cli import artifacts
from amaris_cli.artifacts import How
from amaris_cli.config import deep_merge, load_settings
from amaris_cli.errors import AmarisError
from amaris_cli.gate import probes_path
from amaris_cli.jobs import Hooks, LoopResult, memory_opener
from amaris_cli.llm.cache import OfflineMiss
from amaris_cli.llm.client import AgentUsage
from amaris_cli.llm.endpoint import REDACTED, public_url
from amaris_cli.options import ReplayOptions
from amaris_cli.policy import recorded_layer
from amaris_cli.rundir import Manifest, RunDir, now_iso
from amaris_cli.schedule import describe, spans
from amaris_cli.session import JudgeChoice, Session, open_session, run_settings
from amaris_cli.stages.loop import Indexer, StepPlan, StepReport, recorded_plan, run_step
from amaris_cli.terminal import one_line


def _create(src: RunDir, dst: RunDir, source: Path) -> bool:
    """Make the replay's run directory (or accept the one an interrupted replay of `source` made)."""
    if dst.exists():
        if dst.load_manifest().replay_of != str(source):
            raise AmarisError(f"{dst.path}: already a run directory (not a replay of {source}); choose another --out")
        return False
    copies = [(f, dst.path / f.relative_to(src.path)) for f in sorted((src.path / "rubrics").rglob("step-000000.json"))]
    probes = probes_path(src, src.settings())  # the adoption gate's probes file, when the run holds one
    if probes is not None and probes.is_file() and probes.resolve().is_relative_to(src.path.resolve()):
        copies.append((probes, dst.path / probes.resolve().relative_to(src.path.resolve())))
    # A directory holding only (some of) these copies is this replay's, interrupted before it wrote run.json
    if dst.path.exists() and not {p for p in dst.path.rglob("*") if not p.is_dir()} <= {t for _, t in copies}:
        raise AmarisError(f"{dst.path}: exists and is not empty")
    for original, target in copies:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(original, target)
    config = src.load_manifest().config
    if "gate" not in config:  # recorded before the adoption gate existed: replayed as it ran, without one
        config = {**config, "gate": {"enabled": False}}
    config = _own_memory(config)  # its later commands (memory search, a continued run) read the replay's memory
    dst.save_manifest(Manifest(created_at=now_iso(), config=config, replay_of=str(source)))
    return True


def _recorded_how(src: RunDir, step: int) -> tuple[How, How]:
    """(scoring, evolution): the command settings of each as the source recorded them; a step that was not
    evolved gets its scoring's (an evolve command without flags recorded `{}`: that is what it had)."""
    scored = artifacts.derivation(src, step, artifacts.SCORES)
    scoring = scored.how if scored else How(flags={}, judge=None)
    # A step that stage commands analyzed (and summarized) without an update has no evolution mark.
    evolved = artifacts.evolution(src, step) or artifacts.derivation(src, step, artifacts.ANALYSES)
    if evolved is None:
        return scoring, scoring
    return scoring, How(flags=evolved.flags, judge=evolved.judge or scoring.judge, environment=evolved.environment)


# The file each evolution stage writes first: its recorded command settings are the stage's.
STAGE_FILES = {"analyze": artifacts.ANALYSES, "summarize": artifacts.SUMMARY, "update": artifacts.UPDATE,
               "rescore": artifacts.RESCORES}


def _stage_how(src: RunDir, step: int, stage: str, evolution: How) -> How:
    """The command settings the source's file of `stage` was made with (a stage command's, or the evolution's
    when the file is the evolution's own or was not made)."""
    made = artifacts.derivation(src, step, STAGE_FILES[stage])
    if made is None:
        return evolution
    return How(flags=made.flags, judge=made.judge or evolution.judge, environment=made.environment)


def _own_memory(layer: dict[str, Any]) -> dict[str, Any]:
    """A config layer without `memory.url`: a replay keeps its memory in its own run directory unless its own
    --memory-url names a server (written there, its entries would join the ones the source's live jobs read)."""
    memory = {k: v for k, v in (layer.get("memory") or {}).items() if k != "url"}
    return {**{k: v for k, v in layer.items() if k != "memory"}, **({"memory": memory} if memory else {})}


def _without_redacted_urls(flags: dict[str, Any]) -> dict[str, Any]:
    """Recorded flags without a base URL written with its credentials redacted, which would send "[redacted]" as
    the key: the environment's or the replay's own --base-url takes its place (the record keeps it as it was)."""
    if "agents" not in flags:
        return flags
    return {**flags, "agents": {agent: {k: v for k, v in table.items() if not (k == "base_url" and REDACTED in str(v))}
                                for agent, table in flags["agents"].items()}}


def _shared_memory(src: RunDir, steps: list[int]) -> str | None:
    """The shared memory server the source's updates read (its config's, a command's --memory-url or the
    environment's AMARIS_MEMORY_URL: the update's inputs record it), without credentials."""
    if (url := src.settings().memory.url) is not None:
        return public_url(url)
    for step in steps:
        for made in artifacts.read_provenance(src, step).files.values():
            if url := (made.inputs.get("memory") or {}).get("url") or (made.flags.get("memory") or {}).get("url"):
                return public_url(str(url))
    return None


def _todays_environment_note(src: RunDir, hows: dict[int, tuple[How, How]]) -> str | None:
    """What a replay says when steps recorded before amaris recorded the environment meet answer keys in today's:
    those steps get today's (nothing tells what theirs were), which an unchanged replay may not match."""
    unrecorded = [step for step, (scoring, evolution) in hows.items()
                  if scoring.environment is None or evolution.environment is None]
    today = load_settings(base=src.load_manifest().config).environment_answers or {}
    if not unrecorded or not today:
        return None
    keys = ", ".join(f"{agent}.{key} = {value!r}" for agent, table in today.items() for key, value in table.items())
    many = len(unrecorded) > 1
    return (f"step{'s' if many else ''} {describe(spans(unrecorded))} of {src.path} {'were' if many else 'was'} recorded before amaris "
            f"recorded the environment's answer keys: they get this shell's ({keys}); unset the variables if the "
            "source's commands ran without them")


def replay_job(options: ReplayOptions, hooks: Hooks = Hooks()) -> LoopResult:
    started = time.monotonic()
    source, out = options.source, options.out
    flags = options.config_layer()
    src, dst = RunDir(source), RunDir(out)
    src.require("a replay's source is a run amaris wrote: give the directory that holds its run.json")
    steps = artifacts.steps_with_rollouts(src)
    if not steps:
        raise AmarisError(f"{source}: the run holds no steps to replay")
    plans: dict[int, StepPlan] = {}
    for step in steps:
        plan = recorded_plan(src, step, artifacts.load_rollouts(src, step))
        if options.lag is not None:
            plan.lag, plan.rubric_version = options.lag, None
        if options.rescore is not None:
            plan.rescore = options.rescore
        if options.update_every is not None or options.update_at is not None:
            plan.update = None  # decided by the override
        plans[step] = plan
    for step in steps:
        if (mark := artifacts.evolution(src, step)) is not None and mark.status == "failed":
            hooks.say(f"step {step}: its evolution failed in {source} ({one_line(mark.error or 'no error recorded', 300)}); "
                      "the replay repeats the files it wrote, not the evolution, and leaves the step unevolved")
    if options.memory_url is None and (shared := _shared_memory(src, steps)):
        hooks.say(f"{source} kept its memory in a shared Chroma server ({shared}); this replay keeps its own in "
                  f"{out} (--memory-url to choose a server): writing there would add the replay's entries to the ones "
                  "the source's jobs read, and the updates whose retrievals found other jobs' entries differ here "
                  "(--offline: a miss at the first)")
    created = _create(src, dst, source)
    result = LoopResult()
    sessions: dict[bytes, Session] = {}
    try:
        with ExitStack() as stack:
            def session_for(recorded: How, policy: dict[str, Any] | None = None) -> Session:
                merged = deep_merge(_own_memory(recorded.flags), flags)  # (what the replay's provenance records)
                choice: JudgeChoice = options.judge.value if options.judge else (
                    "sim" if recorded.judge == "sim" else "endpoint")
                key = orjson.dumps([merged, choice, policy, recorded.environment], option=orjson.OPT_SORT_KEYS)
                if key not in sessions:
                    # the answer keys the source's environment set in place of today's: the source's requests again
                    applied = deep_merge(_without_redacted_urls(merged), policy or {})
                    settings = run_settings(dst, applied, recorded_environment=recorded.environment)
                    if recorded.environment is None:  # recorded before environments were: today's, as then
                        settings = settings.unrecorded_environment()
                    settings.memory = settings.memory.model_copy(update={"url": options.memory_url})
                    sessions[key] = stack.enter_context(open_session(
                        dst, settings, choice, flags=merged, announce=hooks.say,
                        announce_judge=not any(s.sim_url for s in sessions.values()),  # said by the first that uses it
                        replaying=src, offline=options.offline))
                return sessions[key]

            hows = {step: _recorded_how(src, step) for step in steps}
            if (note := _todays_environment_note(src, hows)) is not None:
                hooks.say(note)
            first = session_for(hows[steps[0]][1])
            memory = stack.enter_context(memory_opener(first, 0.0, hooks.say))

            async def run_all() -> list[StepReport]:
                indexer = Indexer(await memory())
                reports = []
                try:
                    for step, plan in plans.items():
                        scoring, evolution = hows[step]
                        policy = recorded_layer(src, step)  # what the source's step was scored and evolved under
                        evolver = session_for(evolution, policy)
                        scorer = session_for(scoring, policy)
                        by_stage = {stage: session_for(_stage_how(src, step, stage, evolution), policy)
                                    for stage in STAGE_FILES}
                        report = await run_step(evolver, step, plan, indexer, hooks=hooks, scoring_session=scorer,
                                                by_stage=by_stage)
                        reports.append(report)
                        hooks.on_step(report)
                finally:
                    await indexer.settle()
                    for session in sessions.values():
                        await session.client.aclose()
                return reports

            result.reports = first.execute(run_all())
    except OfflineMiss:
        if created:
            shutil.rmtree(dst.path, ignore_errors=True)  # only copies of the record were there
        raise
    finally:
        totals: dict[str, AgentUsage] = {}
        for session in sessions.values():
            for agent, usage in session.client.usage.items():
                into = totals.setdefault(agent, AgentUsage())
                for name in ("requests", "prompt_tokens", "completion_tokens", "retries", "reasks", "failures", "replayed"):
                    setattr(into, name, getattr(into, name) + getattr(usage, name))
                for kind, n in usage.faults.items():
                    into.faults[kind] = into.faults.get(kind, 0) + n
        result.usage = totals
        result.wall_s = round(time.monotonic() - started, 3)
        result.sim = any(s.sim_url for s in sessions.values())
    return result
