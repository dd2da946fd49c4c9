"""When things happen in a run: which steps update, which rubric version scores a step, and waiting
for the evolutions that write those versions.

Version v of a rubric is written by the update of step v-1 (version 0 by `init`). With lag L, step t
is scored with the newest version <= t - L that the run will have. Only the evolutions of steps
s <= t - L - 1 write such versions, so once those are complete the choice is final: `score` waits for
exactly them (while they run) and then takes the newest version <= t - L. That is what makes an
online run, where the evolution of step t runs in the background while step t+1 is scored,
reproducible: the version never depends on which process happened to finish first.

Evolutions run in step order: the evolution of step t waits for those of all earlier steps of the
run, because its retrieval reads their summaries, updates and memory entries.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from amaris_cli.artifacts import evolution, steps_with_rollouts
from amaris_cli.config import PipelineSettings
from amaris_cli.errors import AmarisError, ConfigError, WaitTimeout
from amaris_cli.locks import holder
from amaris_cli.rundir import RunDir

POLL_S = 0.1
GRACE_S = 1.5  # an evolution started with `&` a moment ago may not hold its lock yet


class NotEvolved(ConfigError):
    """An evolution that the caller needs has not run, and no process is running it."""


class EvolutionFailed(AmarisError):
    """An earlier step's evolution ended in an error; later evolutions cannot go on without it."""


def first_step(run: RunDir) -> int | None:
    steps = steps_with_rollouts(run)
    return steps[0] if steps else None


def update_due(run: RunDir, step: int, pipeline: PipelineSettings) -> bool:
    """Whether the step's evolution updates the rubric: one step of every `update_every`, counted from the
    run's first step: the last of them (`update_at = "last"`: steps N-1, 2N-1, ... when the run starts at 0)
    or the first (`"first"`, the reference's `rubric_update_frequency`: steps 0, N, 2N, ...)."""
    first = first_step(run)
    position = step - (step if first is None else first)  # 0 for the run's first step
    return (position if pipeline.update_at == "first" else position + 1) % pipeline.update_every == 0


def update_decided(run: RunDir, step: int, pipeline: PipelineSettings, asked: bool | None = None) -> bool:
    """Whether the evolution of `step` updates the rubric: as asked (`--update/--no-update`, a replay's plan),
    else as an earlier evolution of the step decided (a run built by `update`, `evolve` and `loop` commands
    keeps each step's decision, so it replays as it ran), else by the schedule (update_due)."""
    if asked is not None:
        return asked
    recorded = evolution(run, step)
    return recorded.update if recorded is not None else update_due(run, step, pipeline)


def earlier_steps(run: RunDir, step: int) -> list[int]:
    return [s for s in steps_with_rollouts(run) if s < step]


def scoring_limit(step: int, lag: int) -> int:
    return max(0, step - lag)


def wait_for_evolutions(run: RunDir, steps: list[int], *, wait: float, say: Callable[[str], None],
                        needed_for: str, fail_if_idle: bool) -> None:
    """Return once the evolutions of `steps` are complete.

    While one is running (its step lock is held) this waits, up to `wait` seconds, saying so once per
    step. One that is not running: with `fail_if_idle` (score, loop) an error naming the command to
    run after a short grace; otherwise (evolve, meant to be started with `&` in any order) keep
    waiting and say what would start it. An evolution that ended in an error is an error here too.
    """
    deadline = time.monotonic() + wait
    told: set[tuple[int, bool]] = set()
    idle_since: dict[int, float] = {}
    while True:
        pending = [(s, mark) for s in steps if (mark := evolution(run, s)) is None or mark.status != "done"]
        if not pending:
            return
        s, mark = pending[0]
        who = holder(run.step_lock_path(s))
        if who is None and mark is not None and mark.status == "failed":
            resume = mark.resume or f"re-run `amaris evolve --run {run.path} --step {s}`"
            raise EvolutionFailed(f"the evolution of step {s} failed ({mark.error}); {needed_for} needs it: {resume}")
        now = time.monotonic()
        if who is None:
            idle_since.setdefault(s, now)
            if fail_if_idle and now - idle_since[s] >= GRACE_S:
                raise NotEvolved(f"{needed_for} needs the evolution of step {s}, which has not run and is not "
                                 f"running: run `amaris evolve --run {run.path} --step {s}` first")
            message = (f"waiting for the evolution of step {s}, which is not running: start it with "
                       f"`amaris evolve --run {run.path} --step {s}`")
        else:
            idle_since.pop(s, None)
            message = f"waiting for the evolution of step {s} ({who})"
        if (s, who is None) not in told and (who is not None or not fail_if_idle):
            say(f"{needed_for}: {message}")
            told.add((s, who is None))
        if now >= deadline:
            raise WaitTimeout(f"{needed_for}: gave up after {wait:g}s {message.removeprefix('waiting ')}")
        time.sleep(POLL_S)


def scoring_version(run: RunDir, step: int, lag: int, explicit: int | None, *, wait: float,
                    say: Callable[[str], None], instance_id: str | None = None) -> int:
    """The rubric version that scores `step` (global rubric; per-instance choices use the same limit)."""
    limit = explicit if explicit is not None else scoring_limit(step, lag)
    needed = [s for s in steps_with_rollouts(run) if s <= limit - 1 and s != step]
    what = f"step {step} (rubric version {explicit})" if explicit is not None else f"step {step} with --lag {lag}"
    wait_for_evolutions(run, needed, wait=wait, say=say, needed_for=f"scoring {what}", fail_if_idle=True)
    if explicit is not None:
        # per-instance runs: updates write the instances' rubrics (rubrics/instances/ID/), not the run's
        numbers = (p.stem.removeprefix("step-") for p in (run.rubric_dir() / "instances").glob("*/step-*.json"))
        known = sorted({*run.rubric_versions(), *(int(n) for n in numbers if n.isdigit())})
        if explicit not in known:
            raise ConfigError(f"{run.path}: rubric version {explicit} does not exist (versions: "
                              f"{', '.join(map(str, known)) or 'none'})")
        return explicit
    versions = [v for v in run.rubric_versions(instance_id) if v <= limit]
    if not versions:
        raise AmarisError(f"{run.path}: no rubric version <= {limit} for step {step}; was the run initialized?")
    return versions[-1]


