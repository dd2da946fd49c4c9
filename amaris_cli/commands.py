"""What each CLI command does, in terms of the stages, plus its printing.

cli.py parses flags and hands them here; these functions call the stages and print the results
(rich on stderr, JSON on stdout).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from amaris_cli.display import emit_json, err, fmt, usage_json, usage_table
from amaris_cli.errors import StageFailed
from amaris_cli.rundir import InputRecord, RunDir, sha256_file


@contextmanager
def progress_bar(label: str, total: int, quiet: bool) -> Iterator[Any]:
    if quiet or not err.is_terminal:
        yield lambda *_: None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
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
            outcome, records = session.execute(
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
        err.print(f"[red]failed[/] {line}")
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
        err.print(f"amaris sim-judge (rule-based, not an LLM) listening: OPENAI_BASE_URL={judge.base_url}")
        await judge.serve_forever()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
