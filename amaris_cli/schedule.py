"""When things happen in a run: which steps update, which rubric version scores a step, and waiting
for the evolutions that write those versions.

Version v of a rubric is written by the update of step v-1 (version 0 by `init`). The steps of a run
are consecutive, from its first step on (the lowest step it holds; a run whose first step is 100 is as
normal as one that starts at 0). With lag L, step t is scored with the newest version <= t - L that the
run will have. Only the evolutions of steps first .. t - L - 1 decide which versions those are, so the
version is final exactly when every one of those steps has its rollouts and its evolution is done:

- one that is running: `score` waits for it;
- one that has not run and is not running: exit 2 naming the command that runs it;
- one that has no rollouts yet (a later step scored before an earlier one): exit 2 naming the steps
  that must come first. Taking the newest version there is now would score the step with a version a
  pending evolution will supersede: the trainer would get rewards that a replay of the run cannot
  reproduce. A user who wants exactly that says so with `--rubric-version V`, which the scores'
  provenance records and a replay takes as it is.

The other order is refused too: a step that the run does not hold yet cannot be added before later
steps whose rubric version its evolution would have changed (scored by lag with a version below the
one it writes), or whose evolution already ran without it (their retrieval and the rubric they edited
left it out). `update_every` does not relax either rule: whether a step updates can be decided per
command (`evolve --update`), so every evolution that may write a version counts. Per-instance runs
follow the same rule, as the same evolutions write the instances' versions.

That is what makes an online run, where the evolution of step t runs in the background while step
t+1 is scored, reproducible: the version never depends on which process happened to finish first.

Evolutions run in step order: the evolution of step t waits for those of all earlier steps of the
run (first .. t-1, each scored and evolved), because its retrieval reads their summaries, updates and
memory entries, and its update edits the rubric they wrote.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence

from amaris_cli.artifacts import SCORES, SUMMARY, UPDATE, evolution, read_provenance, steps_with_rollouts
from amaris_cli.config import PipelineSettings
from amaris_cli.errors import AmarisError, ConfigError, WaitTimeout
from amaris_cli.locks import holder
from amaris_cli.rundir import RunDir, numbered

POLL_S = 0.1
GRACE_S = 1.5  # an evolution started with `&` a moment ago may not hold its lock yet


class NotEvolved(ConfigError):
    """An evolution that the caller needs has not run, and no process is running it."""


class Stopped(Exception):
    """A wait whose caller was cancelled (Ctrl-C): nobody reads its result."""


class OutOfOrder(NotEvolved):
    """A step came before the steps that decide its rubric version, or after later steps whose version or
    evolution it would change (exit 2; `amaris serve` answers 409)."""


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


def earlier_steps(run: RunDir, step: int) -> range:
    """The steps of the run before `step`: from its first step (or `step`, when it comes first) to step - 1,
    whether or not they have rollouts yet (a range: a step near a billion has that many)."""
    first = first_step(run)
    return range(step if first is None else min(first, step), step)


def scoring_limit(step: int, lag: int) -> int:
    return max(0, step - lag)


def gaps(present: Sequence[int], steps: range) -> list[tuple[int, int]]:
    """The runs of `steps` that are not in `present` (sorted), as (first, last) pairs."""
    out: list[tuple[int, int]] = []
    nxt = steps.start
    for s in present:
        if s < nxt or s >= steps.stop:
            continue
        if s > nxt:
            out.append((nxt, s - 1))
        nxt = s + 1
    if nxt < steps.stop:
        out.append((nxt, steps.stop - 1))
    return out


def spans(steps: Sequence[int]) -> list[tuple[int, int]]:
    """Runs of consecutive steps, as (first, last) pairs: [0, 1, 2, 5] -> [(0, 2), (5, 5)]."""
    runs: list[list[int]] = []
    for s in sorted(steps):
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return [(a, b) for a, b in runs]


def describe(runs: Sequence[tuple[int, int]]) -> str:
    """`3`, `3-4`, `3-4 and 7` for spans of steps."""
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _steps_have(spans: Sequence[tuple[int, int]]) -> tuple[str, str]:
    """("step 3", "has") or ("steps 3-4", "have")."""
    one = len(spans) == 1 and spans[0][0] == spans[0][1]
    return f"{'step' if one else 'steps'} {describe(spans)}", "has" if one else "have"


def wait_for_evolutions(run: RunDir, steps: Sequence[int], *, wait: float, say: Callable[[str], None],
                        needed_for: str, fail_if_idle: bool, instead: str = "", served: bool = False,
                        stop: threading.Event | None = None) -> None:
    """Return once the evolutions of `steps` (a list, or a range of the run's steps) are complete.

    While one is running (its step lock is held) this waits, up to `wait` seconds, saying so once per
    step. One that is not running: with `fail_if_idle` (score, loop) an error naming the command to
    run after a short grace; otherwise (evolve, meant to be started with `&` in any order) keep
    waiting and say what would start it. A step of the range that has no rollouts yet is the same, without
    the grace (nothing was started for it), unless a process holds its lock (it is being scored). An
    evolution that ended in an error is an error here too. `instead`: what else the caller may do, said
    with an error; `served`: the caller is `amaris serve`, whose client sends steps over HTTP, not commands;
    `stop`: set when the caller was cancelled (eventloop.blocking): the wait ends (Stopped).
    """
    deadline = time.monotonic() + wait
    told: set[tuple[int, bool]] = set()
    idle_since: dict[int, float] = {}
    missing_told: set[tuple[tuple[int, int], ...]] = set()
    while True:
        present = steps_with_rollouts(run)
        if isinstance(steps, range):
            missing = gaps(present, steps)
            candidates = [s for s in present if s in steps]
        else:
            held = set(present)
            missing = [(s, s) for s in steps if s not in held]
            candidates = [s for s in steps if s in held]
        being_scored = [(a, b) for a, b in missing if a == b and holder(run.step_lock_path(a)) is not None]
        missing = [span for span in missing if span not in being_scored]
        if missing:
            which, have = _steps_have(missing)
            command = _send_first(run, missing, served)
            if fail_if_idle:
                raise _unscored(missing, needed_for, command, instead)
            key = tuple(missing)
            if key not in missing_told:
                say(f"{needed_for}: waiting for {which}, which {have} no rollouts yet: {command}")
                missing_told.add(key)
        pending = [(s, mark) for s in candidates if (mark := evolution(run, s)) is None or mark.status != "done"]
        if not pending and not missing and not being_scored:
            return
        now = time.monotonic()
        if pending:
            s, mark = pending[0]
            who = holder(run.step_lock_path(s))
            # (a client of `amaris serve` cannot start an evolution over HTTP: the command is the run's operator's)
            if who is None and mark is not None and mark.status == "failed":
                resume = mark.resume or f"re-run `amaris evolve --run {run.path} --step {s}`"
                resume = f"for the run's operator: {resume}" if served else resume
                raise EvolutionFailed(f"the evolution of step {s} failed ({mark.error}); {needed_for} needs it: {resume}")
            if who is None:
                idle_since.setdefault(s, now)
                if fail_if_idle and now - idle_since[s] >= GRACE_S:
                    raise NotEvolved(_not_evolved(run, [p for p, m in pending if holder(run.step_lock_path(p)) is None
                                                        and (m is None or m.status != "failed")],
                                                  needed_for, served) + (f"; {instead}" if instead else ""))
                message = (f"waiting for the evolution of step {s}, which is not running: start it with "
                           f"`amaris evolve --run {run.path} --step {s}`")
            else:
                idle_since.pop(s, None)
                message = f"waiting for the evolution of step {s} ({who})"
            if (s, who is None) not in told and (who is not None or not fail_if_idle):
                say(f"{needed_for}: {message}")
                told.add((s, who is None))
        elif being_scored:
            message = f"waiting for step {being_scored[0][0]}, which is being scored"
        else:
            message = f"waiting for {_steps_have(missing)[0]} to be scored and evolved"
        if now >= deadline:
            raise WaitTimeout(f"{needed_for}: gave up after {wait:g}s {message.removeprefix('waiting ')}")
        if stop is None:
            time.sleep(POLL_S)
        elif stop.wait(POLL_S):
            raise Stopped(needed_for)


def _send_first(run: RunDir, missing: Sequence[tuple[int, int]], served: bool) -> str:
    """What makes the steps of `missing` (spans with no rollouts) exist: HTTP requests, or commands."""
    which, first = _steps_have(missing)[0], missing[0][0]
    return (f"send {which} first (POST /score with its rollouts, then POST /complete; its evolution writes the "
            "version)" if served else
            f"score and evolve {which} first (`amaris loop INPUT --run {run.path} --steps {first}:{missing[-1][1]}`, "
            f"or `amaris score ROLLOUTS.jsonl --run {run.path} --step {first}` then `amaris evolve --run {run.path} "
            f"--step {first}` for each)")


def _unscored(missing: Sequence[tuple[int, int]], needed_for: str, command: str, instead: str = "") -> OutOfOrder:
    which, have = _steps_have(missing)
    return OutOfOrder(f"{needed_for} needs the evolutions of the run's steps before it; {which} {have} no rollouts: "
                      f"{command}" + (f"; {instead}" if instead else ""))


def refuse_unscored(run: RunDir, steps: range, needed_for: str, *, served: bool, held: Collection[int] = ()) -> None:
    """OutOfOrder at once when a step of `steps` (what `needed_for` waits on) has no rollouts and no process is
    scoring it (`held`: steps the caller is opening or holds). A served step waited first for the evolutions of
    the steps before it, and one of those waits in turn for the missing step, so a trainer that numbers its steps
    with gaps (0, 2, 4) waited --wait (an hour) for a 503 that named the wrong step."""
    present = sorted({*steps_with_rollouts(run), *(s for s in held if s in steps)})
    missing = [(a, b) for a, b in gaps(present, steps) if not (a == b and holder(run.step_lock_path(a)) is not None)]
    if missing:
        raise _unscored(missing, needed_for, _send_first(run, missing, served))


def _not_evolved(run: RunDir, idle: Sequence[int], needed_for: str, served: bool) -> str:
    """Every evolution `needed_for` waits for that has not run and is not running, and the command that runs it:
    naming only the first, a user ran it and was told of the next."""
    if len(idle) == 1:
        command = f"`amaris evolve --run {run.path} --step {idle[0]}`"
        todo = f"the run's operator starts it with {command}" if served else f"run {command} first"
        return f"{needed_for} needs the evolution of step {idle[0]}, which has not run and is not running: {todo}"
    command = f"`amaris evolve --run {run.path} --step N` for each"
    note = " (each waits for the ones before it, so they may be started together)"
    todo = f"the run's operator starts them with {command}{note}" if served else f"run {command} first{note}"
    return (f"{needed_for} needs the evolutions of steps {describe(spans(idle))}, which have not run "
            f"and are not running: {todo}")


def later_conflicts(run: RunDir, step: int) -> list[str]:
    """Why a step the run does not hold yet cannot be added before the later steps it holds: each later
    step scored by lag with a version older than the one this step's evolution writes (step + 1) where
    that version would have scored it, or evolved without this step. Empty when the step is already there
    (scoring it again changes nothing that later steps were told) or comes after every step."""
    held = steps_with_rollouts(run)
    if step in held:
        return []
    reasons = []
    for later in (s for s in held if s > step):
        provenance = read_provenance(run, later)
        done = provenance.evolution is not None and provenance.evolution.status == "done"
        # (an evolution that failed while it waited for earlier steps read nothing of them: no summary, no update)
        if done or any(name.rsplit("/", 1)[-1] in (SUMMARY, UPDATE) for name in provenance.files):
            reasons.append(f"step {later} was evolved without it (its summary and update read the rubric and the "
                           "history of the steps before it)")
            continue
        scored = provenance.files.get(SCORES)
        if scored is None or scored.inputs.get("rubric_version") is not None:
            continue  # not scored yet (its scoring will apply the rule), or with a version asked for
        limit = scoring_limit(later, int(scored.inputs.get("lag") or 0))
        used = [int(k.rsplit("@", 1)[1]) for k in (scored.inputs.get("rubrics") or {})]
        if step + 1 <= limit and used and max(used) < step + 1:
            reasons.append(f"step {later} was scored with --lag {scored.inputs.get('lag') or 0} and rubric version "
                           f"{max(used)}, but version {step + 1}, which this step's evolution writes, would have "
                           "scored it")
    return reasons


def scoring_version(run: RunDir, step: int, lag: int, explicit: int | None, *, wait: float,
                    say: Callable[[str], None], instance_id: str | None = None, served: bool = False,
                    stop: threading.Event | None = None) -> int:
    """The rubric version that scores `step` (global rubric; per-instance choices use the same limit): by
    the rule of the module docstring, waiting while the evolutions that decide it run. `served`: its errors
    advise a client of `amaris serve` (wait_for_evolutions)."""
    conflicts = later_conflicts(run, step)
    if conflicts:
        evolved = any("evolved without it" in c for c in conflicts)
        advice = (f"Send step {step} to a server of a run of its own" if served else
                  f"Score step {step} in a run of its own" + ("" if evolved else
                  ", or first score those steps again with the version each was given, asked for "
                  "(`--rubric-version V`: what the trainer got stays what it was)"))
        raise OutOfOrder(f"{run.path}: step {step} cannot be added before the later steps the run holds: "
                         f"{'; '.join(conflicts)}. {advice}")
    if explicit is not None:
        needed: Sequence[int] = [s for s in steps_with_rollouts(run) if s <= explicit - 1 and s != step]
        wait_for_evolutions(run, needed, wait=wait, say=say, needed_for=f"scoring step {step} (rubric version "
                            f"{explicit})", fail_if_idle=True, stop=stop)
        # per-instance runs: updates write the instances' rubrics (rubrics/instances/ID/), not the run's
        numbers = (numbered(p.name, "step-", ".json") for p in (run.rubric_dir() / "instances").glob("*/step-*.json"))
        known = sorted({*run.rubric_versions(), *(n for n in numbers if n is not None)})
        if explicit not in known:
            raise ConfigError(f"{run.path}: rubric version {explicit} does not exist (versions: "
                              f"{', '.join(map(str, known)) or 'none'})")
        return explicit
    limit = scoring_limit(step, lag)
    deciding = range(earlier_steps(run, step).start, min(limit, step))
    now = [v for v in run.rubric_versions(instance_id) if v <= limit]
    instead = (f"or score step {step} with the newest version there is now, knowingly: `--rubric-version {now[-1]}` "
               "(recorded; a replay scores it the same way)") if now and not served else ""
    wait_for_evolutions(run, deciding, wait=wait, say=say, needed_for=f"scoring step {step} with --lag {lag}",
                        fail_if_idle=True, instead=instead, served=served, stop=stop)
    versions = [v for v in run.rubric_versions(instance_id) if v <= limit]
    if not versions:
        raise AmarisError(f"{run.path}: no rubric version <= {limit} for step {step}; was the run initialized?")
    return versions[-1]
