"""Printing for each CLI command: progress and tables on stderr for people, JSON on stdout for scripts.

cli.py parses flags and hands them here; the work itself is in jobs.py (pipeline commands),
replay.py, export.py, inspection.py and compare.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from amaris_cli.display import (
    add_column,
    count,
    distinct_names,
    emit_json,
    err,
    fmt,
    plain_table,
    usage_json,
    usage_table,
)
from amaris_cli.options import (
    AnalyzeOptions,
    EvolveOptions,
    HackbenchOptions,
    LoopOptions,
    Memory,
    ReplayOptions,
    ScoreOptions,
    ServeOptions,
    SummarizeOptions,
    UpdateOptions,
)
from amaris_cli.policy import StageFailure


def say(text: str) -> None:
    """A message while a command runs (waiting for another process, the sim-judge in use)."""
    err.print(text, soft_wrap=True)


def new_progress(quiet: bool) -> Progress | None:
    """A progress display on stderr, or None when quiet or when stderr is not a terminal."""
    if quiet or not err.is_terminal:
        return None
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=True)


@contextmanager
def progress_bar(label: str, total: int | None, quiet: bool) -> Iterator[Any]:
    bar = new_progress(quiet)
    if bar is None:
        yield lambda *_: None
        return
    with bar:
        task = bar.add_task(label, total=total)
        yield lambda *_: bar.advance(task)


class StageProgress:
    """One bar per stage of a multi-stage command (loop, evolve, replay)."""

    def __init__(self, quiet: bool, totals: dict[int, int]) -> None:
        self.bar = new_progress(quiet)
        self.totals = totals
        self.current: list[Any] = []

    def __enter__(self) -> StageProgress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def stage(self, stage: str, step: int) -> None:
        if self.bar is None:
            return
        for task in self.current:
            self.bar.remove_task(task)
        self.current.clear()
        per_rollout = stage in ("score", "analyze", "rescore")
        self.current.append(self.bar.add_task(f"step {step}: {stage}", total=self.totals.get(step) if per_rollout else None))

    def record(self, _: object) -> None:
        if self.bar is not None and self.current:
            self.bar.advance(self.current[0])


def _failures(errors: list[str]) -> None:
    for line in errors[:10]:
        err.print(f"[red]failed[/] {escape(line)}", markup=True)


# --- pipeline commands --------------------------------------------------------------------------


def _fail_on(failure: StageFailure | None) -> None:
    """Some records failed under `fail`: everything is written and reported; the command exits 4."""
    if failure is not None:
        from amaris_cli.errors import StageFailed

        raise StageFailed(failure.message)


def run_score(options: ScoreOptions, json_out: bool, quiet: bool) -> None:
    from amaris_cli.jobs import Hooks, score_job

    step = options.step
    with progress_bar(f"scoring step {step}", None, quiet) as advance:
        result = score_job(options, Hooks(say=say, on_record=advance))
    outcome = result.outcome
    assert outcome is not None
    tokens = sum(u.prompt_tokens + u.completion_tokens for u in result.usage.values())
    if json_out:
        emit_json({"step": step, "rubric_version": result.rubric_version, "rubric_versions": outcome.rubric_versions,
                   "rollouts": outcome.total, "scored": outcome.done, "failed": outcome.failed, "reused": outcome.reused,
                   "mean_reward": outcome.mean_reward, "wall_s": result.wall_s, "scores": str(result.scores_path),
                   "rewards": str(result.rewards_path) if result.rewards_path else None, "usage": usage_json(result.usage)})
    elif not quiet:
        table = plain_table(f"step {step}: scores with rubric v{result.rubric_version}")
        for col in ("rollouts", "scored", "failed", "reused", "mean reward", "tokens", "wall s"):
            add_column(table, col, numeric=True)
        table.add_row(str(outcome.total), str(outcome.done), str(outcome.failed), str(outcome.reused),
                      fmt(outcome.mean_reward), str(tokens), f"{result.wall_s:.2f}")
        err.print(table)
        if result.usage:
            err.print(usage_table(result.usage))
        else:  # nothing was asked of a model: an empty table would only look like a failure to count
            err.print("no LLM calls (all reused)" if outcome.reused == outcome.total else "no LLM calls")
        err.print(f"wrote {result.scores_path}" + (f" and {result.rewards_path}" if result.rewards_path else ""))
    _failures(outcome.errors)
    _fail_on(result.failure)


def _report_stage(outcome: Any, usage: dict[str, Any], json_out: bool, quiet: bool, path: Path) -> None:
    if json_out:
        emit_json({"stage": outcome.stage, "step": outcome.step, "total": outcome.total, "done": outcome.done,
                   "failed": outcome.failed, "reused": outcome.reused, "wall_s": outcome.wall_s,
                   "output": str(path), "usage": usage_json(usage)})
        return
    _failures(outcome.errors)
    if not quiet:
        err.print(f"{outcome.stage} step {outcome.step}: {outcome.done} done, {outcome.reused} reused, "
                  f"{outcome.failed} failed in {outcome.wall_s:.2f}s; wrote {path}")
        if usage:
            err.print(usage_table(usage))


def run_analyze(options: AnalyzeOptions, json_out: bool, quiet: bool) -> None:
    from amaris_cli import artifacts
    from amaris_cli.jobs import Hooks, analyze_job
    from amaris_cli.rundir import RunDir

    with progress_bar(f"analyzing step {options.step}", None, quiet) as advance:
        result = analyze_job(options, Hooks(say=say, on_record=advance))
    _report_stage(result.outcome, result.usage, json_out, quiet, artifacts.analyses_path(RunDir(options.run), options.step))
    _fail_on(result.failure)


def run_summarize(options: SummarizeOptions, json_out: bool, quiet: bool) -> None:
    from amaris_cli import artifacts
    from amaris_cli.jobs import Hooks, summarize_job
    from amaris_cli.rundir import RunDir

    result = summarize_job(options, Hooks(say=say))
    _report_stage(result.outcome, result.usage, json_out, quiet, artifacts.summary_path(RunDir(options.run), options.step))


def _print_update(run_path: Path, step: int, outcome: Any) -> None:
    from amaris_cli import artifacts
    from amaris_cli.rundir import RunDir

    run = RunDir(run_path)
    unchanged = f", {outcome.unchanged} changed nothing" if outcome.unchanged else ""
    err.print(f"update step {step}: {', '.join(outcome.strategies)}; +{outcome.added} -{outcome.removed} "
              f"~{outcome.modified} changed{unchanged}, {outcome.rejected} rejected; {outcome.static_entries} static entries, "
              f"{outcome.queries} queries, {outcome.dynamic_hits} dynamic hits")
    record = artifacts.load_update(run, step)
    if record is not None:
        for m in record.applied:
            weight = "" if m.weight is None else f"(w={m.weight:g})"
            err.print(f"  [green]{m.op}[/] {escape(str(m.id))}: {escape(m.text or '')} {weight}", markup=True)
        for r in record.rejected:
            err.print(f"  [red]rejected[/] {r.modification.op} {escape(str(r.modification.id or r.modification.text))}: "
                      f"{escape(r.reason)}", markup=True)
        if record.gate is not None:
            style = "red" if record.gate.decision == "refused" else "green"
            err.print(f"  [{style}]adoption gate: {record.gate.decision}[/] ({record.gate.calls} judge calls): "
                      f"{escape(record.gate.reason)}", markup=True)
            if record.carried_forward:
                err.print(f"  version {record.from_version} carried forward as version {record.to_version}")
    written = run.rubric_path(step + 1)
    err.print(f"wrote {written}" if written.exists() else f"wrote rubric version {step + 1} of each instance under "
              f"{run.rubric_dir()}/instances/")


def _update_json(run_path: Path, step: int, outcome: Any) -> dict[str, Any]:
    from amaris_cli.rundir import RunDir

    return {"step": step, "strategies": outcome.strategies, "added": outcome.added, "removed": outcome.removed,
            "modified": outcome.modified, "unchanged": outcome.unchanged, "rejected": outcome.rejected, "queries": outcome.queries,
            "dynamic_hits": outcome.dynamic_hits, "static_entries": outcome.static_entries,
            "reused": outcome.reused, "refused_by_gate": outcome.refused, "gate_calls": outcome.gate_calls, "next_rubric": str(RunDir(run_path).rubric_path(step + 1))}


def run_update(options: UpdateOptions, json_out: bool, quiet: bool) -> None:
    from amaris_cli.jobs import Hooks, update_job

    result = update_job(options, Hooks(say=say))
    if json_out:
        emit_json(_update_json(options.run, options.step, result.outcome) | {"usage": usage_json(result.usage)})
    elif not quiet:
        _print_update(options.run, options.step, result.outcome)


def say_alarms(run_path: Path, step: int) -> list[dict[str, Any]]:
    """The hacking-onset alarms that start at `step` (alarms.py), said on stderr whatever --quiet says: an
    alarm changes no reward, so a person must read it."""
    from amaris_cli.alarms import alarms_at
    from amaris_cli.reader import RunReader
    from amaris_cli.rundir import RunDir

    found = alarms_at(RunReader(RunDir(run_path)), step)
    for alarm in found:
        kind = alarm.kind + (f" ({alarm.pattern})" if alarm.pattern else "")  # the pattern: an analyzer's free name
        err.print(f"[bold yellow]alarm[/] step {alarm.step}, {escape(kind)}: {escape(alarm.reason)}", markup=True,
                  soft_wrap=True)
    return [a.model_dump(mode="json") for a in found]


def run_evolve(options: EvolveOptions, json_out: bool, quiet: bool) -> None:
    from amaris_cli import artifacts
    from amaris_cli.jobs import Hooks, evolve_job
    from amaris_cli.rundir import RunDir

    run, step = RunDir(options.run), options.step
    total = len(artifacts.load_rollouts(run, step)) if artifacts.rollouts_path(run, step).exists() else 0
    with StageProgress(quiet or json_out, {step: total}) as bar:
        result = evolve_job(options, Hooks(say=say, on_stage=bar.stage, on_record=bar.record))
    outcome = result.outcome
    assert outcome is not None
    alarms = say_alarms(options.run, step)
    if json_out:
        emit_json({"step": step, "alarms": alarms, "analyzed": outcome.analyzed.done, "analysis_failed": outcome.analyzed.failed,
                   "summarized": outcome.summarized.done + outcome.summarized.reused, "update": result.update,
                   "updated": _update_json(options.run, step, outcome.updated) if outcome.updated else None,
                   "rescore_mean_reward": outcome.rescored.mean_reward if outcome.rescored else None,
                   "wall_s": result.wall_s, "usage": usage_json(result.usage)})
        return
    if quiet:
        return
    a = outcome.analyzed
    err.print(f"evolve step {step}: analyzed {a.done} ({a.reused} reused, {a.failed} failed); summary "
              f"{'reused' if outcome.summarized.reused else 'written'}")
    if outcome.updated is not None:
        _print_update(options.run, step, outcome.updated)
    else:
        err.print(f"no update at step {step} (pipeline.update_every); summary indexed in the memory")
    if outcome.rescored is not None:
        rescored = outcome.rescored
        failed = (f"; {rescored.failed} of {rescored.total} could not be judged (their --rescored rewards are the "
                  "failure policy's)") if rescored.failed else ""
        err.print(f"rescored step {step} with rubric v{step + 1}: mean reward {fmt(rescored.mean_reward)}{failed}")
    err.print(f"done in {result.wall_s:.1f}s")


def _modified_unchanged(r: Any) -> tuple[int, int]:
    """A loop step's modified criteria and the edits that changed nothing (none without an update)."""
    return (r.update.modified, r.update.unchanged) if r.update is not None else (0, 0)


def _step_line(r: Any) -> str:
    modified, unchanged = _modified_unchanged(r)
    return (f"step {r.step}: rubric v{r.rubric_version}, {r.rollouts} rollouts, mean reward {fmt(r.mean_reward)}, "
            f"{r.failed} failed, update {r.strategy or '-'} (+{r.added}/-{r.removed}/~{modified}"
            + (f", {unchanged} changed nothing" if unchanged else "") + f", {r.rejected} rejected"
            + (", refused by the adoption gate" if r.update is not None and r.update.refused else "") + ")"
            + (f", rescored {fmt(r.rescore_mean)}" if r.rescore_mean is not None else "")
            + f", {r.tokens} tokens, {r.wall_s:.2f}s")


def _loop_output(result: Any, run_path: Path, json_out: bool, quiet: bool, replayed: bool) -> None:
    made = sum(u.requests for u in result.usage.values())
    reused = sum(u.replayed for u in result.usage.values())
    if json_out:
        emit_json({"run": str(run_path), "wall_s": result.wall_s, "calls_made": made, "calls_reused": reused,
                   "usage": usage_json(result.usage), "steps": [
                       {"step": r.step, "rubric_version": r.rubric_version, "rollouts": r.rollouts,
                        "mean_reward": r.mean_reward, "failed": r.failed, "strategy": r.strategy, "added": r.added,
                        "removed": r.removed, **dict(zip(("modified", "unchanged"), _modified_unchanged(r), strict=True)),
                        "rejected": r.rejected, "rescore_mean_reward": r.rescore_mean,
                        "tokens": r.tokens, "wall_s": r.wall_s} for r in result.reports]})
        return
    if quiet:
        return
    if result.usage:
        err.print(usage_table(result.usage))
    strategies = ", ".join(f"{r.step}:{r.strategy}" for r in result.reports if r.strategy)
    err.print(f"{count(len(result.reports), 'step')}; updates {strategies or 'none'}")
    if replayed or reused:
        err.print(f"model requests: {made} made, {reused} answered from a record")
    err.print(f"done in {result.wall_s:.1f}s; run directory: {run_path}")


@contextmanager
def _multi_step_hooks(json_out: bool, quiet: bool, run_path: Path) -> Iterator[Any]:
    from amaris_cli.jobs import Hooks

    def on_step(report: Any) -> None:
        if not quiet and not json_out:
            err.print(_step_line(report), soft_wrap=True)  # one line a step, for logs and grep
        say_alarms(run_path, report.step)

    with StageProgress(quiet or json_out, {}) as bar:
        yield Hooks(say=say, on_step=on_step, on_stage=bar.stage, on_record=bar.record)


def run_loop_command(options: LoopOptions, json_out: bool, quiet: bool) -> None:
    from amaris_cli.jobs import loop_job

    with _multi_step_hooks(json_out, quiet, options.run) as hooks:
        result = loop_job(options, hooks)
    _loop_output(result, options.run, json_out, quiet, replayed=False)


def run_replay(options: ReplayOptions, json_out: bool, quiet: bool) -> None:
    from amaris_cli.replay import replay_job

    with _multi_step_hooks(json_out, quiet, options.out) as hooks:
        result = replay_job(options, hooks)
    _loop_output(result, options.out, json_out, quiet, replayed=True)


def run_serve(options: ServeOptions) -> int:
    from amaris_cli.serve.server import run_server

    lag = "t-1 (as `score --lag 1`)" if options.lag == 1 else "t, after the evolution of step t-1 (lag 0)"

    def say_plain(text: str) -> None:
        err.print(text, markup=False, highlight=False, soft_wrap=True)

    def listening(url: str) -> None:
        # One plain, unwrapped line: scripts read the URL from it.
        print(f"amaris serve listening: {url} (run {options.run}, {options.mode.value} mode: step t is scored with "
              f"rubric version {lag})", file=sys.stderr, flush=True)

    return run_server(options, say_plain, listening)


# --- readers ------------------------------------------------------------------------------------


def run_rewards(run_path: Path, step: int, fmt_: str, rescored: bool, failed_as: float | None,
                output: Path | None) -> None:
    from amaris_cli.export import rewards_bytes
    from amaris_cli.jsonio import write_bytes_atomic
    from amaris_cli.rundir import RunDir
    from amaris_cli.terminal import json_terminal_safe

    run = RunDir(run_path)
    run.require()
    data = rewards_bytes(run, step, fmt_, rescored, failed_as)
    if output is None:
        sys.stdout.write(json_terminal_safe(data.decode()))  # the same JSON, nothing raw for a terminal
    else:
        write_bytes_atomic(output, data)


def last_rubric_size(run: dict[str, Any]) -> str:
    """The criteria of the run's last rubric; in a per-instance run, of each instance's last rubric (the global rubric
    is the one none of them has evolved): their range and the instances."""
    sizes = list(run["instance_rubric_sizes"].values())
    if not sizes:
        return str(run["final_rubric_size"])
    spread = str(sizes[0]) if min(sizes) == max(sizes) else f"{min(sizes)}-{max(sizes)}"
    return f"{spread} ({count(len(sizes), 'instance')})"


def run_compare(paths: list[Path], json_out: bool) -> None:
    from amaris_cli.compare import compare_runs, failed_alike
    from amaris_cli.rundir import RunDir

    table = compare_runs([RunDir(p) for p in paths])
    if json_out:
        emit_json(table)
        return
    runs = table["runs"]
    steps = sorted({int(s) for run in runs for s in run["mean_reward"]})
    names = distinct_names([run["run"] for run in runs])
    per_step = plain_table("mean reward per step", "a mean is over the step's scored rollouts: those the judge could "
                           "not score (failed, under --on-error skip or neutral) are left out of it; the means of runs "
                           "whose failed rollouts differ are over different rollouts")

    def cell(run: dict[str, Any], step: str) -> str:
        shown = fmt(run["mean_reward"].get(step))
        if run["failed"].get(step):
            shown += f" ({run['failed'][step]} failed)"
        return shown + (" stale" if step in run["stale"] else "")

    add_column(per_step, "step", numeric=True)
    for name in names:
        add_column(per_step, name, numeric=True)
    add_column(per_step, "comparable")
    for step in map(str, steps):
        why = table["why_not_comparable"][step]
        alike = failed_alike(runs, step)
        verdict = f"no: {why}" if why is not None else \
            (f"yes: the same {count(alike, 'rollout')} failed in every run" if len(runs) > 1
             else f"yes ({count(alike, 'rollout')} failed)") if alike else "yes"
        per_step.add_row(step, *[cell(run, step) for run in runs], verdict)
    err.print(per_step)
    # One column a run, as above: a row a run would need nine columns, which do not fit 80.
    totals = plain_table("runs")
    add_column(totals, "measure")
    for name in names:
        add_column(totals, name, numeric=True)
    rows = [("steps", lambda r: len(r["mean_reward"])), ("criteria in the last rubric", last_rubric_size),
            ("updates by strategy", lambda r: " ".join(f"{k[:4]}:{v}" for k, v in sorted(r["strategies"].items())) or "-"),
            ("edits", lambda r: r["edits"]), ("reversals", lambda r: r["reversals"]),
            ("calls sent to a model", lambda r: r["calls_made"]), ("calls answered from a record", lambda r: r["calls_reused"]),
            ("tokens spent", lambda r: r["tokens"])]
    for label, value in rows:
        totals.add_row(label, *[str(value(run)) for run in runs])
    err.print(totals)


def run_memory_rebuild(run_path: Path, json_out: bool, memory: Memory) -> None:
    from amaris_cli.memory.service import rebuild_run

    added, counts, where = rebuild_run(run_path, memory.config_layer())
    if json_out:
        emit_json({"indexed": added, "counts": counts})
    else:
        err.print(f"rebuilt {where}: {added} entries ({', '.join(f'{k} {v}' for k, v in counts.items())})")


def run_memory_search(run_path: Path, text: str, n: int, before_step: int | None, json_out: bool,
                      memory: Memory) -> None:
    from amaris_cli.memory.service import search_run

    hits, limit = search_run(run_path, text, n, before_step, memory.config_layer())
    if json_out:
        emit_json([h.model_dump(mode="json") for h in hits])
        return
    table = plain_table(f"memory hits for {text!r} (steps < {limit})")
    for col in ("distance", "step", "type", "id", "text"):
        add_column(table, col, numeric=col in ("distance", "step"))
    for h in hits:
        table.add_row(f"{h.distance:.4f}", str(h.step), h.type, h.id, h.text[:300])
    err.print(table)


def run_sim_judge(host: str, port: int, latency: float, fault_rate: float, faults: str | None, seed: int) -> None:
    from amaris_cli import eventloop
    from amaris_cli.errors import ConfigError
    from amaris_cli.simjudge.server import ALL_FAULT_KINDS, FAULT_KINDS, SimJudge, SimJudgeConfig

    kinds = tuple(k.strip() for k in faults.split(",")) if faults else FAULT_KINDS
    unknown = [k for k in kinds if k not in ALL_FAULT_KINDS]
    if unknown:
        raise ConfigError(f"--faults: unknown kind(s) {', '.join(unknown)}; known: {', '.join(ALL_FAULT_KINDS)}")
    judge = SimJudge(SimJudgeConfig(latency=latency, fault_rate=fault_rate, fault_kinds=kinds, seed=seed))

    async def serve() -> None:
        await judge.start(host, port)
        # One plain, unwrapped line: scripts read the URL from it.
        print(f"amaris sim-judge (rule-based, not an LLM) listening: OPENAI_BASE_URL={judge.base_url}",
              file=sys.stderr, flush=True)
        await judge.serve_forever()

    try:
        eventloop.run(serve())
    except KeyboardInterrupt:
        pass


def run_inspect(run_path: Path, step: int | None, json_out: bool) -> None:
    from amaris_cli.inspect_view import inspect_view
    from amaris_cli.inspection import inspect_run
    from amaris_cli.rundir import RunDir

    data = inspect_run(RunDir(run_path), step, whole=json_out)
    if json_out:
        emit_json(data)
        return
    err.print(inspect_view(data))


def run_hackbench(options: HackbenchOptions, json_out: bool, quiet: bool) -> None:
    from amaris_cli.hackbench.models import RESULTS
    from amaris_cli.hackbench.runner import run_benchmark
    from amaris_cli.jobs import Hooks

    progress = StageProgress(quiet, {})
    with progress:
        report = run_benchmark(options, Hooks(say=say, on_stage=progress.stage))
    if json_out:
        emit_json(report.model_dump(mode="json"))
    if quiet:
        return

    def gain(i: Any) -> str:
        if i.mean is None:
            return "-"
        return f"{i.mean:+.2f}" + (f"\n[{i.low:+.2f},{i.high:+.2f}]" if i.low is not None else "")

    def tokens(s: Any) -> str:
        n = s.prompt_tokens + s.completion_tokens
        return f"{n / 1000:.1f}k" if n >= 1000 else str(n)

    from rich import box

    table = Table(title=f"hack benchmark: {report.items} honest answers, judge: {report.judge}", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("family", overflow="fold")
    # an: the variants with an analysis (recall's denominator), shown when the analyzer failed on some (else it is n)
    short = any(f.analysis_failed for f in report.families)
    columns = [("n", 2), *([("an", 2)] if short else []), ("rec", 4), ("prec", 4), ("gain v0", 13),
               (f"gain v{report.updates}", 13), ("calls", 5), ("tok", 5)]
    for col, width in columns:
        table.add_column(col, justify="right", no_wrap=True, min_width=width)
    for f in report.families:
        table.add_row(f.family, str(f.variants), *([str(f.analyzed)] if short else []),
                      fmt(f.analyzer_recall, 2), fmt(f.analyzer_precision, 2),
                      gain(f.gain_initial), gain(f.gain_after_updates), str(f.spent.calls), tokens(f.spent))
    table.caption = (("an: the variants analyzed at step 0 (the analyzer failed on the rest of n: left out of rec "
                      "and prec). " if short else "")
                     + "rec, prec: the analyzer's recall (of the variants it analyzed) and precision in naming the "
                     "hack (step 0). "
                     "gain: a variant's "
                     f"reward minus its own control's, mean over items (an item's variants averaged first) [95% bootstrap "
                     f"interval], at the initial rubric (v0) and after "
                     f"{report.updates} update(s) "
                     f"(v{report.updates}). calls, tok: scorer and analyzer requests and tokens for the family's variants. "
                     "The judge is measured by rec, prec and gain v0; amaris by the later gain and the honest drift.")
    table.caption_justify = "left"
    err.print(table)
    skipped = [f"{f.family} {f.skipped} ({f.skip_reasons[0]})" for f in report.families if f.skipped]
    if skipped:
        err.print("skipped answers: " + "; ".join(skipped), soft_wrap=True)
    err.print(f"honest drift after {report.updates} update(s): {gain(report.honest_drift).replace(chr(10), ' ')}; "
              "honest answers the analyzer "
              f"flagged: {fmt(report.honest_flagged, 2)}; failed rollouts: {report.failed}"
              + ("" if report.analysis_failed is None else
                 f"; failed analyses: {report.analysis_failed} (left out of rec, prec and the honest answers flagged)"),
              soft_wrap=True)
    err.print(f"spent: {count(report.total.calls, 'call')} to the model ({report.total.reused} answered from the record), "
              f"{report.total.prompt_tokens + report.total.completion_tokens} tokens; "
              f"{report.shared.calls} of the calls for controls, summaries and updates", soft_wrap=True)
    for note in report.notes:
        err.print(note, soft_wrap=True)
    err.print(f"wrote {options.out / RESULTS} (run: {report.run})", soft_wrap=True)
