"""What each CLI command does, in terms of the stages, plus its printing.

cli.py parses flags and hands them here; these functions call the stages and print the results
(rich on stderr, JSON on stdout).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from amaris_cli.display import emit_json, err, fmt, usage_json, usage_table
from amaris_cli.errors import StageFailed
from amaris_cli.rundir import InputRecord, RunDir, sha256_file


def new_progress(quiet: bool) -> Progress | None:
    """A progress display on stderr, or None when quiet or when stderr is not a terminal."""
    if quiet or not err.is_terminal:
        return None
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=True)


@contextmanager
def progress_bar(label: str, total: int, quiet: bool) -> Iterator[Any]:
    bar = new_progress(quiet)
    if bar is None:
        yield lambda *_: None
        return
    with bar:
        task = bar.add_task(label, total=total)
        yield lambda *_: bar.advance(task)


def run_score(rollouts_file: Path, run_path: Path, step: int, mapping_items: list[str], rubric_version: int | None,
              lag: int, on_error: str, concurrency: int | None, force: bool, judge: str, flags: dict[str, Any],
              json_out: bool, quiet: bool) -> None:
    from amaris_cli.rollouts import parse_mapping, read_rollouts
    from amaris_cli.session import open_session
    from amaris_cli.stages.common import store_rollouts
    from amaris_cli.stages.score import score_step

    run = RunDir(run_path)
    run.require()
    settings = run.settings()
    # Read and validate everything before the run is touched.
    rollouts = read_rollouts(rollouts_file, parse_mapping(mapping_items), settings.pipeline.instance_field)
    rollouts = [r.model_copy(update={"step": step}) for r in rollouts]
    started = time.monotonic()
    with open_session(run, flags, judge, announce=err.print) as session:
        store_rollouts(run, step, rollouts, force)
        session.manifest.inputs[str(step)] = InputRecord(path=str(rollouts_file), sha256=sha256_file(rollouts_file))
        neutral = session.settings.pipeline.neutral_reward if on_error == "neutral" else None
        with progress_bar(f"scoring step {step}", len(rollouts), quiet) as advance:
            outcome, _ = session.execute(
                score_step(session, step, rollouts, lag=lag, rubric_version=rubric_version,
                           neutral_reward=neutral, on_done=advance))
        usage = session.client.usage
    wall = time.monotonic() - started
    tokens = sum(u.prompt_tokens + u.completion_tokens for u in usage.values())
    if json_out:
        emit_json({"step": step, "rollouts": outcome.total, "scored": outcome.done, "failed": outcome.failed,
                   "reused": outcome.reused, "mean_reward": outcome.mean_reward, "wall_s": round(wall, 3),
                   "scores": str(run.step_dir(step) / "scores.jsonl"), "usage": usage_json(usage)})
    elif not quiet:
        table = Table(title=f"step {step}: scores", title_justify="left")
        for col in ("rollouts", "scored", "failed", "reused", "mean reward", "tokens", "wall s"):
            table.add_column(col, justify="right")
        table.add_row(str(outcome.total), str(outcome.done), str(outcome.failed), str(outcome.reused),
                      fmt(outcome.mean_reward), str(tokens), f"{wall:.2f}")
        err.print(table)
        err.print(usage_table(usage))
        err.print(f"wrote {run.step_dir(step) / 'scores.jsonl'}")
    for line in outcome.errors[:10]:
        err.print(f"[red]failed[/] {escape(line)}", markup=True)
    if outcome.failed and on_error == "fail":
        raise StageFailed(f"{outcome.failed} of {outcome.total} rollouts could not be judged (written as failed); "
                          "re-run the same command to retry them, or use --on-error skip|neutral")


def run_sim_judge(host: str, port: int, latency: float, fault_rate: float, faults: str | None, seed: int) -> None:
    import asyncio

    from amaris_cli.errors import ConfigError
    from amaris_cli.simjudge.server import FAULT_KINDS, SimJudge, SimJudgeConfig

    kinds = tuple(k.strip() for k in faults.split(",")) if faults else FAULT_KINDS
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        raise ConfigError(f"--faults: unknown kind(s) {', '.join(unknown)}; known: {', '.join(FAULT_KINDS)}")
    judge = SimJudge(SimJudgeConfig(latency=latency, fault_rate=fault_rate, fault_kinds=kinds, seed=seed))

    async def serve() -> None:
        await judge.start(host, port)
        # One plain, unwrapped line: scripts read the URL from it.
        print(f"amaris sim-judge (rule-based, not an LLM) listening: OPENAI_BASE_URL={judge.base_url}",
              file=sys.stderr, flush=True)
        await judge.serve_forever()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


# --- stage commands -------------------------------------------------------------------------------


def open_memory(session: Any) -> Any:
    from amaris_cli.memory.store import MemoryStore

    return MemoryStore.open(session.run, session.settings.memory)


def run_analyze(run_path: Path, step: int, judge: str, flags: dict[str, Any], json_out: bool, quiet: bool) -> None:
    from amaris_cli.session import open_session
    from amaris_cli.stages.analyze import analyze_step
    from amaris_cli.stages.common import load_rollouts

    run = RunDir(run_path)
    with open_session(run, flags, judge, announce=err.print) as session:
        total = len(load_rollouts(run, step))
        with progress_bar(f"analyzing step {step}", total, quiet) as advance:
            outcome = session.execute(analyze_step(session, step, on_done=advance))
        usage = session.client.usage
    _report_stage(outcome, usage, json_out, quiet, run.step_dir(step) / "analyses.jsonl")
    if outcome.failed:
        raise StageFailed(f"{outcome.failed} of {outcome.total} rollouts could not be analyzed; re-run to retry them")


def run_summarize(run_path: Path, step: int, judge: str, flags: dict[str, Any], force: bool, json_out: bool, quiet: bool) -> None:
    from amaris_cli.session import open_session
    from amaris_cli.stages.summarize import summarize_step

    run = RunDir(run_path)
    with open_session(run, flags, judge, announce=err.print) as session:
        memory = open_memory(session)
        outcome = session.execute(summarize_step(session, step, memory, force))
        usage = session.client.usage
    _report_stage(outcome, usage, json_out, quiet, run.step_dir(step) / "summary.json")


def _report_stage(outcome: Any, usage: dict[str, Any], json_out: bool, quiet: bool, path: Path) -> None:
    if json_out:
        emit_json({"stage": outcome.stage, "step": outcome.step, "total": outcome.total, "done": outcome.done,
                   "failed": outcome.failed, "reused": outcome.reused, "wall_s": outcome.wall_s,
                   "output": str(path), "usage": usage_json(usage)})
        return
    for line in outcome.errors[:10]:
        err.print(f"[red]failed[/] {escape(line)}", markup=True)
    if not quiet:
        err.print(f"{outcome.stage} step {outcome.step}: {outcome.done} done, {outcome.reused} reused, "
                  f"{outcome.failed} failed in {outcome.wall_s:.2f}s; wrote {path}")
        if usage:
            err.print(usage_table(usage))


def run_update(run_path: Path, step: int, judge: str, flags: dict[str, Any], force: bool, json_out: bool, quiet: bool) -> None:
    from amaris_cli.records import load_update
    from amaris_cli.session import open_session
    from amaris_cli.stages.update import update_step

    run = RunDir(run_path)
    with open_session(run, flags, judge, announce=err.print) as session:
        memory = open_memory(session)
        outcome = session.execute(update_step(session, step, memory, force))
        usage = session.client.usage
    record = load_update(run, step)
    if json_out:
        emit_json({"step": step, "strategies": outcome.strategies, "added": outcome.added, "removed": outcome.removed,
                   "modified": outcome.modified, "rejected": outcome.rejected, "queries": outcome.queries,
                   "dynamic_hits": outcome.dynamic_hits, "static_entries": outcome.static_entries,
                   "next_rubric": str(run.rubric_path(step + 1)), "usage": usage_json(usage)})
        return
    if quiet:
        return
    err.print(f"update step {step}: {', '.join(outcome.strategies)}; +{outcome.added} -{outcome.removed} "
              f"~{outcome.modified} changed, {outcome.rejected} rejected; {outcome.static_entries} static entries, "
              f"{outcome.queries} queries, {outcome.dynamic_hits} dynamic hits")
    if record is not None:
        for m in record.applied:
            err.print(f"  [green]{m.op}[/] {escape(str(m.id))}: {escape(m.text or '')} {'' if m.weight is None else f'(w={m.weight:g})'}", markup=True)
        for r in record.rejected:
            err.print(f"  [red]rejected[/] {r.modification.op} {escape(str(r.modification.id or r.modification.text))}: {escape(r.reason)}", markup=True)
    err.print(f"wrote {run.rubric_path(step + 1)}")


def parse_step_range(text: str | None) -> tuple[int | None, int | None]:
    from amaris_cli.errors import ConfigError

    if not text:
        return None, None
    start, sep, end = text.partition(":")
    try:
        lo = int(start) if start else None
        hi = int(end) if end else None
        if not sep:
            hi = lo
    except ValueError:
        raise ConfigError(f"--steps {text!r}: expected START:END, START: or :END (inclusive)") from None
    return lo, hi


def run_loop_command(source: Path, run_path: Path, step_range: str | None, mapping_items: list[str], lag: int,
                     rescore: bool, on_error: str, judge: str, flags: dict[str, Any], json_out: bool, quiet: bool) -> None:
    from amaris_cli.errors import InputError, InputErrors
    from amaris_cli.rollouts import discover_steps, parse_mapping
    from amaris_cli.stages.loop import load_step

    run = RunDir(run_path)
    run.require()
    settings = run.settings()
    mapping = parse_mapping(mapping_items)
    lo, hi = parse_step_range(step_range)
    discovered = discover_steps(source, mapping, settings.pipeline.instance_field)
    selected = {s: v for s, v in discovered.items() if (lo is None or s >= lo) and (hi is None or s <= hi)}
    if not selected:
        raise InputError(source, f"no steps in range {step_range!r} (found {', '.join(map(str, discovered)) or 'none'})")
    # Validate every step's input before the run is touched.
    steps, errors = {}, []
    for step, src in selected.items():
        try:
            steps[step] = load_step(src, step, mapping, settings.pipeline.instance_field)
        except InputErrors as exc:
            errors.extend(exc.errors)
        except InputError as exc:
            errors.append(exc)
    if errors:
        raise InputErrors(errors)
    inputs = {str(step): InputRecord(path=str(src), sha256=sha256_file(src))
              for step, src in selected.items() if isinstance(src, Path)}
    if source.is_file():
        inputs["loop"] = InputRecord(path=str(source), sha256=sha256_file(source))
    execute_loop(run, steps, flags, judge, lag, rescore, on_error, json_out, quiet, inputs=inputs)


def execute_loop(run: RunDir, steps: dict[int, Any], flags: dict[str, Any], judge: str, lag: int, rescore: bool,
                 on_error: str, json_out: bool, quiet: bool, inputs: dict[str, InputRecord] | None = None,
                 replay: Any = None) -> dict[str, Any]:
    """Run the loop on validated steps, record how it ran, and print per-step lines and totals."""
    from amaris_cli.rundir import LoopRecord
    from amaris_cli.session import open_session
    from amaris_cli.stages.loop import StepReport, run_loop

    reports: list[StepReport] = []

    def on_step(r: StepReport) -> None:
        reports.append(r)
        if not quiet and not json_out:
            err.print(f"step {r.step}: rubric v{r.rubric_version}, {r.rollouts} rollouts, mean reward {fmt(r.mean_reward)}, "
                      f"{r.failed} failed, update {r.strategy or '-'} (+{r.added}/-{r.removed}, {r.rejected} rejected)"
                      + (f", rescored {fmt(r.rescore_mean)}" if r.rescore_mean is not None else "")
                      + f", {r.tokens} tokens, {r.wall_s:.2f}s")

    bar = new_progress(quiet or json_out)
    current: list[Any] = []

    def on_stage(stage: str, step: int) -> None:
        if bar is None:
            return
        for task in current:
            bar.remove_task(task)
        current.clear()
        per_rollout = stage in ("score", "analyze", "rescore")
        current.append(bar.add_task(f"step {step}: {stage}", total=len(steps[step]) if per_rollout else None))

    def on_record(_: object) -> None:
        if bar is not None and current:
            bar.advance(current[0])

    started = time.monotonic()
    with open_session(run, flags, judge, announce=err.print, replay=replay) as session:
        session.manifest.inputs.update(inputs or {})
        session.manifest.loop = LoopRecord(lag=lag, rescore=rescore, on_error=on_error, flags=flags,
                                           judge="sim" if session.sim_url else "endpoint")
        session.save_manifest()
        memory = open_memory(session)
        if bar is not None:
            bar.start()
        try:
            session.execute(run_loop(session, steps, memory, lag=lag, rescore=rescore, on_error=on_error,
                                     on_step=on_step, on_stage=on_stage, on_record=on_record))
        finally:
            if bar is not None:
                bar.stop()
        usage = session.client.usage
    wall = time.monotonic() - started
    made = sum(u.requests for u in usage.values())
    reused = sum(u.replayed for u in usage.values())
    result = {"run": str(run.path), "wall_s": round(wall, 3), "calls_made": made, "calls_reused": reused,
              "usage": usage_json(usage), "steps": [
                  {"step": r.step, "rubric_version": r.rubric_version, "rollouts": r.rollouts, "mean_reward": r.mean_reward,
                   "failed": r.failed, "strategy": r.strategy, "added": r.added, "removed": r.removed,
                   "rejected": r.rejected, "rescore_mean_reward": r.rescore_mean, "tokens": r.tokens,
                   "wall_s": r.wall_s} for r in reports]}
    if json_out:
        emit_json(result)
    elif not quiet:
        if usage:
            err.print(usage_table(usage))
        strategies = ", ".join(f"{r.step}:{r.strategy}" for r in reports if r.strategy)
        err.print(f"{len(reports)} steps; updates {strategies or 'none'}")
        if replay is not None:
            err.print(f"model requests: {made} made, {reused} answered from the record")
        err.print(f"done in {wall:.1f}s; run directory: {run.path}")
    return result


def run_replay(source: Path, out: Path, flags: dict[str, Any], judge: str | None, lag: int | None, rescore: bool | None,
               offline: bool, json_out: bool, quiet: bool) -> None:
    import shutil

    from amaris_cli.config import deep_merge
    from amaris_cli.errors import AmarisError
    from amaris_cli.replay import OfflineMiss, ReplayCache
    from amaris_cli.rundir import Manifest, now_iso
    from amaris_cli.stages.common import load_rollouts

    src = RunDir(source)
    manifest = src.load_manifest()
    recorded = manifest.loop
    steps = {s: load_rollouts(src, s) for s in _steps_with_rollouts(src)}
    if not steps:
        raise AmarisError(f"{source}: the run holds no steps to replay")
    dst = RunDir(out)
    created = False
    if dst.exists():
        previous = dst.load_manifest()
        if previous.replay_of != str(source):
            raise AmarisError(f"{out}: already a run directory (not a replay of {source}); choose another --out")
    else:
        if out.exists() and any(out.iterdir()):
            raise AmarisError(f"{out}: exists and is not empty")
        created = True
        with dst.lock():
            for rubric_file in sorted((src.path / "rubrics").rglob("step-000000.json")):
                target = dst.path / rubric_file.relative_to(src.path)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(rubric_file, target)
            stamp = now_iso()
            dst.save_manifest(Manifest(created_at=stamp, updated_at=stamp, config=manifest.config,
                                       prompt_hashes=manifest.prompt_hashes, replay_of=str(source)))
    merged = deep_merge(recorded.flags if recorded else {}, flags)
    cache = ReplayCache(src.calls_path, offline=offline)
    try:
        execute_loop(dst, steps, merged, judge or (recorded.judge if recorded else "endpoint"),
                     recorded.lag if lag is None and recorded else (lag or 0),
                     recorded.rescore if rescore is None and recorded else bool(rescore),
                     recorded.on_error if recorded else "fail", json_out, quiet, replay=cache)
    except OfflineMiss:
        if created:
            shutil.rmtree(dst.path, ignore_errors=True)  # only copies of the record were there
        raise


def _steps_with_rollouts(run: RunDir) -> list[int]:
    from amaris_cli.records import step_numbers

    return [s for s in step_numbers(run) if (run.step_dir(s) / "rollouts.jsonl").exists()]


def run_compare(paths: list[Path], json_out: bool) -> None:
    from amaris_cli.compare import compare_runs

    table = compare_runs([RunDir(p) for p in paths])
    if json_out:
        emit_json(table)
        return
    steps = sorted({int(s) for run in table["runs"] for s in run["mean_reward"]})
    per_step = Table(title="mean reward per step", title_justify="left")
    per_step.add_column("step", justify="right")
    for run in table["runs"]:
        per_step.add_column(Path(run["run"]).name, justify="right")
    for step in steps:
        per_step.add_row(str(step), *[fmt(run["mean_reward"].get(str(step))) for run in table["runs"]])
    err.print(per_step)
    totals = Table(title="runs", title_justify="left")
    for col in ("run", "steps", "rubric", "strategies", "edits", "reversals", "tokens", "made", "reused"):
        totals.add_column(col, justify="left" if col in ("run", "strategies") else "right")
    for run in table["runs"]:
        strategies = " ".join(f"{k[:4]}:{v}" for k, v in sorted(run["strategies"].items()))
        totals.add_row(Path(run["run"]).name, str(len(run["mean_reward"])), str(run["final_rubric_size"]),
                       strategies, str(run["edits"]), str(run["reversals"]), str(run["tokens"]),
                       str(run["calls_made"]), str(run["calls_reused"]))
    err.print(totals)


def run_memory_rebuild(run_path: Path, json_out: bool, flags: dict[str, Any] | None = None) -> None:
    from amaris_cli.config import load_settings
    from amaris_cli.memory.service import RunCatalog, rebuild

    run = RunDir(run_path)
    settings = load_settings(base=run.load_manifest().config, flags=flags)
    with run.lock():
        from amaris_cli.memory.store import MemoryStore

        store = MemoryStore.open(run, settings.memory, rebuilding=True)
        added = rebuild(store, RunCatalog(run))
        counts = store.counts()
    if json_out:
        emit_json({"indexed": added, "counts": counts})
    else:
        err.print(f"rebuilt {run.memory_path}: {added} entries ({', '.join(f'{k} {v}' for k, v in counts.items())})")


def run_memory_search(run_path: Path, text: str, n: int, before_step: int | None, json_out: bool,
                      flags: dict[str, Any] | None = None) -> None:
    from amaris_cli.config import load_settings
    from amaris_cli.memory.service import RunCatalog, dynamic_retrieval
    from amaris_cli.memory.store import MemoryStore
    from amaris_cli.records import step_numbers

    run = RunDir(run_path)
    settings = load_settings(base=run.load_manifest().config, flags=flags)
    with run.lock():
        store = MemoryStore.open(run, settings.memory)
        limit = before_step if before_step is not None else (max(step_numbers(run), default=0) + 1)
        hits = dynamic_retrieval(store, RunCatalog(run), [text], n, limit, set())
    if json_out:
        emit_json([h.model_dump(mode="json") for h in hits])
        return
    table = Table(title=f"memory hits for {text!r} (steps < {limit})", title_justify="left")
    for col in ("distance", "step", "type", "id", "text"):
        table.add_column(col, overflow="fold")
    for h in hits:
        table.add_row(f"{h.distance:.4f}", str(h.step), h.type, h.id, h.text[:300])
    err.print(table)


def run_inspect(run_path: Path, step: int | None, json_out: bool) -> None:
    from amaris_cli.inspect_view import inspect_view
    from amaris_cli.inspection import inspect_run

    data = inspect_run(RunDir(run_path), step)
    if json_out:
        emit_json(data)
        return
    err.print(inspect_view(data))
