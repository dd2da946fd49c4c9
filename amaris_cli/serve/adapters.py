"""Reward functions for trainers that call `amaris serve`.

TRL (GRPO): `reward_funcs=[TRLReward(url)]`, called as `reward_func(prompts, completions, **kwargs)`
with prompts and completions as strings or chat message lists and the dataset's other columns as
keyword lists; returns one reward per completion, None for a completion the judge could not score
(TRL 1.16 counts a completion every reward function gave None as unscorable: NaN reward, advantage 0).

verl: a `custom_reward_function` file whose `compute_score = VerlReward(url)`, called as
`compute_score(data_source, solution_str, ground_truth, extra_info)` (naive, dapo, prime, the reward
loop); `VerlReward.batch` is the batch manager's `compute_score(data_sources=, solution_strs=,
ground_truths=, extra_infos=)`. Both return floats; a failed judgement raises RewardFailed unless
`failed_as` is given (verl's prime and rate-limited managers catch it and train 0.0).

Steps. One amaris step is one batch of rollouts the trainer generated together:
- TRL: one generation batch. TRL generates every `steps_per_generation * num_iterations` micro-batches
  and counts optimizer steps (`global_step`) every `gradient_accumulation_steps`, so a generation's
  `global_step` is 0, 2, 4 at steps_per_generation 2 and may repeat (two generations within one
  optimizer step when steps_per_generation < gradient_accumulation_steps). The adapter reads the
  schedule from the trainer that calls it and numbers the generations 0, 1, 2, ...
- verl: `extra_info["global_steps"]` when verl puts it there (its reward loop, streaming with the
  rollout: the version of the weights that generated the response), else `step=` given to the adapter,
  else the server's open step (`--rollouts-per-step N` completes each step after N rollouts).

Completing steps (`complete`): "auto" (default) leaves it to the server when it was started with
`--rollouts-per-step`, else completes each step as soon as its whole batch is in: TRL and the batch
manager after the call ("each_call"; several TRL processes each send their shard's /complete, naming
their rank and their number), verl's one-response-at-a-time managers when the first rollout of a later
step comes ("on_next_step"; call `.finish()` after the last step). "never" leaves it to you. In sync
mode the server must complete steps itself (its answers wait for the step's evolution).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import orjson

from amaris_cli.serve.api import ScoreResponse
from amaris_cli.serve.client import DEFAULT_URL, AmarisClient, ServeError
from amaris_cli.training import METADATA_FIELDS

_log = logging.getLogger("amaris")

Complete = Literal["auto", "on_next_step", "each_call", "never"]
StepSource = int | Callable[[], int] | None
TRL_INTERNAL = {"trainer_state", "completion_ids", "log_extra", "log_metric", "environments"}
REFERENCE_COLUMNS = ("reference", "ground_truth", "solution", "answer", "label", "target", "gts")
INSTANCE_COLUMNS = ("instance_id", "example_id", "uid", "id")
VERL_STEP = "global_steps"  # where verl puts the step in extra_info; a dataset's own `step` field is its data
DATASET_PREFIX = "dataset_"  # a dataset field named as the server reads a request's metadata (METADATA_FIELDS)
# What verl's managers add to extra_info besides the dataset's own fields (not the rollout's metadata).
VERL_INTERNAL = {"num_turns", "rollout_reward_scores", "min_global_steps", "max_global_steps"}
# extra_info["split"] of a validation set, as verl's data preprocessing scripts write it (gsm8k.py: "test").
VERL_VALIDATION_SPLITS = ("test", "val", "valid", "validation", "eval", "dev")


class RewardFailed(RuntimeError):
    """The judge could not score a rollout and the trainer needs a number (verl without `failed_as`)."""


def _jsonable(value: Any) -> Any:
    """A value as JSON would carry it (numpy scalars and arrays included), or None when it cannot be."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    elif hasattr(value, "item") and callable(value.item):
        value = value.item()
    try:
        return orjson.loads(orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY))
    except (TypeError, orjson.JSONEncodeError):
        return None


def _integer(value: Any) -> int | None:
    value = _jsonable(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class TRLSchedule:
    """When TRL's GRPOTrainer generates, read from the trainer that calls the reward function:
    generation k is made at micro-batch k * steps_per_generation * num_iterations, during optimizer step
    floor(that / gradient_accumulation_steps), which is the `global_step` the reward function sees, as long as
    every optimizer step takes gradient_accumulation_steps micro-batches (an epoch's last one may take fewer)."""

    gradient_accumulation_steps: int
    steps_per_generation: int
    num_iterations: int
    process_index: int = 0
    num_processes: int = 1

    @classmethod
    def of(cls, trainer: Any) -> TRLSchedule | None:
        args = getattr(trainer, "args", None)
        try:
            accumulation, per_generation = int(args.gradient_accumulation_steps), int(args.steps_per_generation)
            iterations = int(getattr(trainer, "num_iterations", args.num_iterations))
        except (AttributeError, TypeError, ValueError):
            return None
        accelerator = getattr(trainer, "accelerator", None)
        return cls(accumulation, per_generation, iterations, int(getattr(accelerator, "process_index", 0)),
                   int(getattr(accelerator, "num_processes", 1)))

    def first_generation(self, global_step: int) -> int:
        """The first generation made during optimizer step `global_step`: ceil(g * ga / (spg * ni))."""
        every = self.steps_per_generation * self.num_iterations
        return -(-global_step * self.gradient_accumulation_steps // every)


class _Stepper:
    """Which step the rollouts of a call belong to, and when to complete a step."""

    def __init__(self, client: AmarisClient, complete: Complete, step: StepSource, one_at_a_time: bool) -> None:
        self.client = client
        self.mode = complete
        self.step = step
        self.one_at_a_time = one_at_a_time  # verl: one response per call
        self.calls = 0
        self.pending: int | None = None  # the step scored last and not yet completed
        self.begun = -1  # on_next_step: the latest step whose rollouts began to come (an earlier step's are in)
        self.completed: set[int] = set()  # on_next_step: the steps completed
        self.to_complete: set[int] = set()  # on_next_step: steps whose /complete is due (sent again after an outage)
        self.unsent: dict[int, str] = {}  # steps called for none of whose requests the server took, and why
        self.reached: set[int] = set()  # steps a request of which the server answered
        self.sync = False
        self.rollouts_per_step: int | None = None
        self.resolved = False
        self.lock = threading.Lock()  # verl's reward loop calls from a thread pool
        self.started = time.time()  # (this machine's clock) a step the server opened before is a leftover
        self.leftovers_done = False
        self.leftovers_lock = threading.Lock()

    def resolve_mode(self) -> Complete:
        """Ask the server once how it runs: the completion mode "auto" stands for, and whether it is sync."""
        if not self.resolved:
            health = self.client.health()
            self.sync = health.mode == "sync"
            self.rollouts_per_step = health.rollouts_per_step
            if self.sync and (self.one_at_a_time or not health.rollouts_per_step):
                # A sync answer waits until the step is complete and evolved: every rollout of the step
                # must be in flight at once, and the server must know when the last one is in.
                raise RuntimeError(
                    "the amaris server runs in sync mode, whose answers wait for the step's evolution: "
                    + ("this trainer scores one response at a time; serve in async mode" if self.one_at_a_time else
                       "start it with --rollouts-per-step N (N: the completions of one reward call)"))
            if self.mode == "auto":
                self.mode = "never" if health.rollouts_per_step else \
                    "on_next_step" if self.one_at_a_time else "each_call"
            self.resolved = True
        return self.mode

    def given(self) -> int | None:
        """The step the adapter was given (`step=`), if any."""
        if callable(self.step):
            return int(self.step())
        return None if self.step is None else int(self.step)

    def counted(self) -> int:
        """No step from the trainer nor the adapter: calls are counted (one call, one batch)."""
        with self.lock:
            self.calls += 1
            return self.calls - 1

    def before(self, step: int) -> None:
        self._report_outages(step)
        if self.resolve_mode() != "on_next_step":
            return
        with self.lock:
            self.begun = max(self.begun, step)
            if self.pending is not None and step > self.pending:
                self.to_complete.add(self.pending)
                self.completed.add(self.pending)
                self.pending = None
        self._complete_due()

    def _complete_due(self) -> None:
        """Send the /complete of each step due. One the server did not take (it was down or restarting) is sent
        again at the next call: dropped, the step stayed open, and every step from two later on was a 409."""
        with self.lock:
            due = sorted(self.to_complete)
            self.to_complete.clear()
        for i, done in enumerate(due):
            try:
                self.client.rollouts_complete(done)
            except Exception as exc:
                if _not_taken(exc):
                    with self.lock:
                        self.to_complete.update(due[i:])
                raise

    def lost(self, step: int, exc: BaseException) -> None:
        """A request of `step` failed: one the server did not take (refused, unreachable, stopping) makes the step
        an outage, unless the server answered another of its requests."""
        if _not_taken(exc):
            with self.lock:
                if step not in self.reached:
                    self.unsent.setdefault(step, f"its requests failed before amaris serve took them: {exc}"[:500])

    def reached_server(self, step: int) -> None:
        with self.lock:
            self.reached.add(step)
            self.unsent.pop(step, None)

    def _report_outages(self, step: int) -> None:
        """Before a request of `step`: each earlier step this process numbered and none of whose requests the server
        took is told to the server as an outage (POST /outage), which writes it with no rollouts and evolves it as
        skipped. Left missing, the steps after it were refused (409) for the rest of the training, since a run's
        steps are consecutive. The server refuses a step another process of the trainer reached (it holds its
        rollouts) or one before which a step is missing; that is said, and the step is not told again. A step the
        server refuses as one it holds rollouts of reached it (its answers were lost on the way back: a client that
        timed out while a slow judge judged them): unless the server completes steps by their count, this process
        completes it, as it completes a step whose answers came (left open, every step from two later on was a 409)."""
        with self.lock:
            due = sorted((s, why) for s, why in self.unsent.items() if s < step)
            for s, _ in due:
                del self.unsent[s]
        reached = []
        for i, (lost, why) in enumerate(due):
            try:
                self.client.outage(lost, why)
            except ServeError as exc:
                if exc.status == 503:
                    self._unreported(due[i:])
                    raise
                _log.warning("amaris: step %d, none of whose requests from this process reached the server, was not "
                             "written as an outage: %s", lost, exc.error)
                if exc.status == 409:
                    reached.append((lost, why))
            except httpx.TransportError:
                self._unreported(due[i:])
                raise
            else:
                _log.warning("amaris: step %d was written with no rollouts (%s); it evolves as skipped, its rubric "
                             "carried forward", lost, why)
        if reached and self.resolve_mode() != "never":
            self._complete_reached(reached)

    def _complete_reached(self, steps: list[tuple[int, str]]) -> None:
        """Complete the steps the server holds rollouts of that this process got no answer for; one already
        complete, or with nothing to complete (a 404 or 409), is left as it is. One whose /complete the server did
        not take is told again before the next request (the server's 409 then brings it here again)."""
        with self.lock:
            steps = [(s, why) for s, why in steps if s not in self.completed]
            self.completed.update(s for s, _ in steps)
        for i, (done, _) in enumerate(steps):
            try:
                self.client.rollouts_complete(done)
            except Exception as exc:
                if isinstance(exc, ServeError) and exc.status in (404, 409):
                    continue
                if _not_taken(exc):
                    with self.lock:
                        self.completed.difference_update(s for s, _ in steps[i:])
                    self._unreported(steps[i:])
                raise

    def _unreported(self, due: list[tuple[int, str]]) -> None:
        with self.lock:
            self.unsent.update(due)

    def after(self, step: int, *, shard: int = 0, shards: int = 1) -> None:
        if self.mode == "each_call":
            try:
                self.client.rollouts_complete(step, shard=shard, shards=shards)
            except ServeError as exc:
                if shards > 1 and exc.status == 422:
                    raise RuntimeError(
                        f"this amaris server does not complete a step from {shards} processes' shards ({exc.error}); "
                        "start it with --rollouts-per-step N (N: the completions of one generation over all "
                        "processes)") from exc
                raise
        elif self.mode == "on_next_step":
            with self.lock:
                # An answer that comes after a later step's first rollout (verl's rate-limited manager gave up on
                # the call and went on): that rollout found nothing of this step to complete, so it is done now.
                # Left pending, a later step's answer took its place, and the step stayed open for good.
                late = step < self.begun and step not in self.completed
                if late:
                    self.completed.add(step)
                elif step >= self.begun:
                    self.pending = step if self.pending is None else max(self.pending, step)
            if late:
                try:
                    self.client.rollouts_complete(step)
                except ServeError as exc:
                    if exc.status not in (404, 409):  # completed meanwhile
                        raise

    def finish(self) -> None:
        with self.lock:
            if self.pending is not None:
                self.to_complete.add(self.pending)
                self.completed.add(self.pending)
                self.pending = None
        self._complete_due()

    def restart(self, *, since: float) -> None:
        """Another training through the same adapter: the steps the server opened before `since` (the end of
        the previous training's last call) are leftovers again, handled before the new training's first rollout."""
        with self.leftovers_lock:
            self.started, self.leftovers_done = since, False

    def leftovers(self, *, discard_from: int | None = None) -> None:
        """Once, before this adapter's first rollout: the steps the server holds open since before the adapter
        was made (a crashed run's partial batches) are completed, so that new rollouts do not join them, or,
        from step `discard_from` on, discarded (a trainer resuming from a checkpoint numbers its steps as
        before and generates those batches again). Another process of the trainer may have done it first."""
        with self.leftovers_lock:  # held throughout: a caller beside it would join a leftover meanwhile
            if self.leftovers_done:
                return
            self._handle_leftovers(discard_from)
            self.leftovers_done = True

    def _handle_leftovers(self, discard_from: int | None) -> None:
        health = self.client.health()
        # `started` is this machine's clock, `opened_at` the server's: the trainer may run on another machine
        # whose clock is off by more than the moments between making the adapter and another of the
        # training's processes opening a step. The server's answer carries its clock, stamped at some moment
        # before the answer arrived, so its clock minus ours is at least `now` minus the arrival: taken at that
        # bound, a step the training opened is never read as opened before the adapter was made, whatever the
        # round trip (at worst a crashed run's step opened within the round trip before it is read as this
        # training's). An older server sends no clock, and the two clocks are then taken as one.
        offset = 0.0 if health.now is None else health.now - time.time()
        started = self.started + offset
        for left in health.open:
            if left.state != "open" or (left.opened_at is not None and left.opened_at >= started):
                continue
            try:
                if discard_from is not None and left.step >= discard_from:
                    self.client.discard(left.step, opened_before=started)  # not one reopened since
                elif left.shards:
                    for shard in range(left.shards):
                        if shard not in left.shards_in:
                            self.client.rollouts_complete(left.step, shard=shard, shards=left.shards)
                else:
                    self.client.rollouts_complete(left.step)
            except ServeError as exc:
                if exc.status not in (404, 409):  # done by another process of the trainer meanwhile
                    raise


class _ServedReward:
    """What both reward functions share: the client, the stepper, and completing the last step."""

    client: AmarisClient
    stepper: _Stepper
    max_workers: int

    def finish(self) -> None:
        """Complete the last step (with complete="on_next_step")."""
        self.stepper.finish()

    def _each(self, call: Callable[[Any], ScoreResponse], items: Sequence[Any], *, all_at_once: bool = False
              ) -> list[ScoreResponse]:
        """`call` of each item, in threads: at most max_workers at once, or all (in sync mode no answer comes
        before the step's last rollout is in)."""
        workers = len(items) if all_at_once else min(self.max_workers, len(items))
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            return list(pool.map(call, items))


class TRLReward(_ServedReward):
    """TRL's reward function signature over `amaris serve`: one amaris step per generation batch."""

    def __init__(self, url: str = DEFAULT_URL, *, complete: Complete = "auto", step: StepSource = None,
                 reference_columns: Sequence[str] = REFERENCE_COLUMNS, instance_column: str | None = None,
                 max_workers: int = 32, client: AmarisClient | None = None, name: str = "amaris") -> None:
        self.client = client or AmarisClient(url)
        self.stepper = _Stepper(self.client, complete, step, one_at_a_time=False)
        self.reference_columns = tuple(reference_columns)
        self.instance_column = instance_column
        self.max_workers = max_workers
        self.__name__ = name  # TRL names the reward in its logs after this
        self._origin: tuple[int, int] | None = None  # (global_step, amaris step) of the training's first generation
        self._generations = 0  # the generations of this training so far
        self._training: Any = None  # the TrainerState of the training _origin and _generations count (each train() makes one)
        self._last_call = time.time()  # when the latest call ended (or this adapter was made)

    def _step(self, kwargs: dict[str, Any]) -> tuple[int, TRLSchedule | None]:
        given = self.stepper.given()
        # TRL passes log_metric, a method of the trainer: the schedule and the process come from it.
        trainer = getattr(kwargs.get("log_metric"), "__self__", None)
        schedule = TRLSchedule.of(trainer) if trainer is not None else None
        if given is not None:
            return given, schedule
        global_step = _integer(getattr(kwargs.get("trainer_state"), "global_step", None))
        if global_step is None:
            return self.stepper.counted(), schedule
        if schedule is None:
            return global_step, None  # a caller without TRL's trainer: its global_step names the batch
        state = kwargs.get("trainer_state")
        if self._origin is not None and state is not self._training:
            # Another train() through this adapter (a retry in a notebook, train(resume_from_checkpoint=...) after
            # a crash): numbered afresh, and the steps the last training left open are leftovers again.
            self._origin = None
            self.stepper.restart(since=self._last_call)
        if self._origin is None:
            self._training = state
            self._origin = (global_step, self._first_step(schedule, global_step))
            self._generations = 0
        # Counted, not computed from global_step: when an epoch's micro-batches are not a multiple of
        # gradient_accumulation_steps, its last optimizer step is short and the generations after it come earlier
        # than the schedule puts them (one step number skipped, and the next generation a 409 that ended training).
        # Every process of the training calls once per generation, so each counts the same.
        step = self._origin[1] + self._generations
        self._generations += 1
        return step, schedule

    def _first_step(self, schedule: TRLSchedule, global_step: int) -> int:
        """The amaris step of this adapter's first generation. A training that starts at optimizer step 0 makes
        generation 0. One resumed from a checkpoint starts generating afresh at the checkpoint's step (TRL keeps
        no generation buffer in a checkpoint), often after the server has completed the steps its crashed run
        went on to: those steps keep the crashed run's rollouts, and the resumed generations follow the last
        of them (they are new rollouts, scored with the rubric that has evolved meanwhile)."""
        latest = _last_taken(self.client)
        first = schedule.first_generation(global_step)
        if latest >= first:
            _log.warning("amaris: the run's steps up to %d are complete (or being completed), so this training's "
                         "generations from optimizer step %d are numbered from step %d: a training resumed after "
                         "its crashed run went on, or a new training in a run that holds another's steps",
                         latest, global_step, latest + 1)
        return max(first, latest + 1)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        try:
            return self._score(prompts, completions, kwargs)
        finally:
            self._last_call = time.time()

    def _score(self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: dict[str, Any]) -> list[float | None]:
        if _evaluating(kwargs):
            return self._validate(prompts, completions, kwargs)
        step, schedule = self._step(kwargs)
        self.stepper.before(step)
        self.stepper.leftovers(discard_from=step)
        bodies = self._bodies(prompts, completions, kwargs)

        answers = self._each(lambda body: self.client.score(step=step, **body), bodies, all_at_once=self.stepper.sync)
        shard = (schedule.process_index, schedule.num_processes) if schedule else (0, 1)
        self.stepper.after(step, shard=shard[0], shards=shard[1])
        return [a.score for a in answers]

    def _validate(self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: dict[str, Any]) -> list[float | None]:
        """TRL's evaluation (GRPOTrainer scores it with the same reward_funcs): judged by POST /validate, in no
        training step, with the rubric version the server's next training step gets."""
        bodies = self._bodies(prompts, completions, kwargs)
        return [a.score for a in self._each(lambda body: self.client.validate(step=None, **body), bodies)]

    def _bodies(self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        columns = {k: v for k, v in kwargs.items()
                   if k not in TRL_INTERNAL and isinstance(v, list | tuple) and len(v) == len(completions)}
        return [self._rollout(i, prompts, completions, columns) for i in range(len(completions))]

    def _rollout(self, i: int, prompts: Sequence[Any], completions: Sequence[Any],
                 columns: dict[str, Sequence[Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": _jsonable(prompts[i]), "response": _jsonable(completions[i])}
        row = {k: _jsonable(v[i]) for k, v in columns.items()}
        reference = next((row[c] for c in self.reference_columns if row.get(c) is not None), None)
        if reference is not None:
            body["reference"] = reference
        instance = row.get(self.instance_column) if self.instance_column else \
            next((row[c] for c in INSTANCE_COLUMNS if isinstance(row.get(c), str | int)), None)
        if instance is not None and not isinstance(instance, bool):
            body["instance_id"] = str(instance)
        # The dataset's columns travel as metadata: an `id` column names the prompt, shared by all of
        # its generations, so it must not become the rollouts' id.
        body["metadata"] = _dataset_metadata({k: v for k, v in row.items() if v is not None})
        return body


class VerlReward(_ServedReward):
    """verl's `compute_score(data_source, solution_str, ground_truth, extra_info)` over `amaris serve`,
    and `.batch` for the batch manager. The prompt is `extra_info["question"]` or `["prompt"]` when the
    dataset puts it there (verl passes the response only); the instance is `extra_info["index"]`. A response
    whose `extra_info["split"]` is one of `validation_splits` is validation (verl scores its validation set with
    the training's reward function, stamped with the next training batch's step): it is judged by
    `POST /validate`, in no training step."""

    def __init__(self, url: str = DEFAULT_URL, *, complete: Complete = "auto", step: StepSource = None,
                 failed_as: float | None = None, max_workers: int = 32, client: AmarisClient | None = None,
                 validation_splits: Sequence[str] = VERL_VALIDATION_SPLITS) -> None:
        if failed_as is not None and not math.isfinite(failed_as):
            raise ValueError(f"failed_as must be a finite reward, got {failed_as}")  # the trainer would train on it
        self.client = client or AmarisClient(url)
        self.validation_splits = frozenset(split.lower() for split in validation_splits)
        self.stepper = _Stepper(self.client, complete, step, one_at_a_time=True)
        self.batch_stepper = _Stepper(self.client, "each_call" if complete == "auto" else complete, step,
                                      one_at_a_time=False)
        self.failed_as = failed_as
        self.max_workers = max_workers
        self._offset: int | None = None  # this training's amaris step minus verl's global_steps (_renumbered)
        self._offset_lock = threading.Lock()
        self._settings = (self.client.base_url, complete, step, failed_as, max_workers, tuple(validation_splits))
        self.__name__ = "compute_score"

    def __reduce__(self) -> tuple[Any, ...]:
        """verl's prime manager sends compute_score to a process pool, pickled, task by task: the copy there is
        built from the settings, once per process (_verl_reward), with its own connections, but with the moment
        its training began (a copy made after a sibling opened the step took that step for a crashed run's
        leftover and completed it)."""
        return (_verl_reward, (*self._settings, (self.stepper.started, self.batch_stepper.started), os.getpid()))

    def __call__(self, data_source: Any, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None,
                 **kwargs: Any) -> float:
        info = {k: _jsonable(v) for k, v in (extra_info or {}).items()}
        if self._validation(info):
            return self._reward(self._validate(data_source, solution_str, ground_truth, info))
        step = _verl_step(info)
        step = self.stepper.given() if step is None else self._renumbered(step)
        if step is None:
            return self._into_server_step(data_source, solution_str, ground_truth, info)
        try:
            self.stepper.before(step)
            # A crashed run's partial batches: from this step on discarded (a resumed verl generates them again),
            # earlier ones completed. Without this, the resumed batch joined its crashed run's half of the step.
            self.stepper.leftovers(discard_from=step)
            answer = self.client.score(step=step, **_verl_body(data_source, solution_str, ground_truth, info))
        except Exception as exc:
            self.stepper.lost(step, exc)  # (verl's rate-limited manager trains 0.0 on it and goes on)
            raise
        self.stepper.reached_server(step)
        self.stepper.after(step)
        return self._reward(answer)

    def _renumbered(self, step: int) -> int:
        """verl's step as this training's amaris step. verl resumed from a checkpoint stamps its batches with the
        checkpoint's steps again, often after the server completed the steps its crashed run went on to (verl
        saves every `save_freq` steps): those keep the crashed run's rollouts, and the resumed batches follow the
        last of them, as TRLReward's generations do (each response was a 409, which verl raises). Validation is
        numbered so too: verl validates before training (val_before_train) with the first training batch's
        global_steps, and a validation renumbered later was judged with the rubric of the crashed run's step.
        Decided at this process's first response, from the steps no longer taking rollouts then: verl's reward
        workers each decide it during the validation before training or the first batch, whose step none of them
        completes before the batch is in."""
        with self._offset_lock:
            if self._offset is None:
                latest = _last_taken(self.client)
                self._offset = max(0, latest + 1 - step)
                if self._offset:
                    _log.warning("amaris: the run's steps up to %d are complete (or being completed), so verl's steps "
                                 "from %d on are numbered from step %d: a training resumed after its crashed run went "
                                 "on, or a new training in a run that holds another's steps", latest, step, latest + 1)
        return step + self._offset

    def _into_server_step(self, data_source: Any, solution_str: str, ground_truth: Any, info: dict[str, Any]) -> float:
        """No step from verl nor the adapter: the rollout names none and joins the server's open step, which
        the server closes after its N-th rollout. Without --rollouts-per-step nothing would tell one batch
        from the next: refused."""
        self.stepper.resolve_mode()
        if not self.stepper.rollouts_per_step:
            raise ValueError("verl gave no step (extra_info has no 'global_steps': its legacy reward managers pass "
                             "none): start amaris serve with --rollouts-per-step N (N = train_batch_size x rollout.n) "
                             "so that it closes each step, or give VerlReward(step=...)")
        self.stepper.leftovers()
        return self._reward(self.client.score(step=None, **_verl_body(data_source, solution_str, ground_truth, info)))

    def batch(self, data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
              extra_infos: Sequence[dict[str, Any] | None] | None = None, **kwargs: Any) -> list[float]:
        """verl's BatchRewardManager calls this once per batch: the batch is one step, completed after."""
        infos = [{k: _jsonable(v) for k, v in (e or {}).items()}
                 for e in (extra_infos if extra_infos is not None else [None] * len(solution_strs))]
        validation = {self._validation(info) for info in infos}
        if validation == {True}:  # a validation batch: judged in no step, and nothing to complete
            rows = list(zip(data_sources, solution_strs, ground_truths, infos, strict=True))
            return [self._reward(a) for a in self._each(lambda row: self._validate(*row), rows)]
        if len(validation) > 1:
            raise ValueError("one verl batch mixes validation responses (extra_info['split'] in "
                             f"{sorted(self.validation_splits)}) with training ones")
        steps = {_verl_step(info) for info in infos}
        if len(steps) > 1:
            raise ValueError(f"one verl batch carries several steps in extra_info: {sorted(steps, key=str)}")
        step = steps.pop() if steps else None
        if step is None:
            step = self.batch_stepper.given()
        bodies = [_verl_body(d, s, g, i) for d, s, g, i in zip(data_sources, solution_strs, ground_truths, infos,
                                                               strict=True)]
        try:
            if step is not None:
                self.batch_stepper.before(step)  # an earlier batch none of which reached the server: an outage
            self.batch_stepper.resolve_mode()
            # Each batch is a step of its own: a step an earlier run left open is completed first, not joined (or,
            # from a named step on, discarded: a resumed verl generates it again).
            self.batch_stepper.leftovers(discard_from=step)
            answers = self._each(lambda body: self._scored(step, body), bodies, all_at_once=self.batch_stepper.sync)
        except Exception as exc:
            if step is not None:
                self.batch_stepper.lost(step, exc)
            raise
        steps = sorted({a.step for a in answers})
        if not steps:
            return []
        if len(steps) > 1:  # --rollouts-per-step closed the server's step within the batch
            raise RuntimeError(f"one verl batch went to steps {steps}: serve with --rollouts-per-step equal to the "
                               "batch's size, or without it (each batch is then completed after the call)")
        self.batch_stepper.after(steps[0])
        return [self._reward(a) for a in answers]

    def _scored(self, step: int | None, body: dict[str, Any]) -> ScoreResponse:
        answer = self.client.score(step=step, **body)
        if step is not None:
            self.batch_stepper.reached_server(step)
        return answer

    def finish(self) -> None:
        self.stepper.finish()
        self.batch_stepper.finish()

    def _validation(self, info: dict[str, Any]) -> bool:
        split = info.get("split")
        return isinstance(split, str) and split.lower() in self.validation_splits

    def _validate(self, data_source: Any, solution_str: str, ground_truth: Any, info: dict[str, Any]) -> ScoreResponse:
        body = _verl_body(data_source, solution_str, ground_truth, info)
        if "instance_id" in body:  # verl numbers each split's rows from 0: test row 5 is not training prompt 5
            body["instance_id"] = f"{info['split']}-{body['instance_id']}"
        step = _verl_step(info)
        return self.client.validate(step=None if step is None else self._renumbered(step), **body)

    def _reward(self, answer: ScoreResponse) -> float:
        if answer.score is not None and math.isfinite(answer.score):
            return float(answer.score)
        if self.failed_as is not None:
            return float(self.failed_as)
        raise RewardFailed(f"amaris could not score rollout {answer.id} of step {answer.step}: {answer.error}; "
                           "start the server with --on-error neutral, or give VerlReward(failed_as=...)")


# A process's copy of each VerlReward (verl's prime manager unpickles one per task), keyed by the process too: a
# forked child's copies are its own.
_COPIES: dict[tuple[Any, ...], VerlReward] = {}


def _verl_reward(url: str, complete: Complete, step: StepSource, failed_as: float | None,
                 max_workers: int, validation_splits: tuple[str, ...] = VERL_VALIDATION_SPLITS,
                 started: tuple[float, float] | None = None, made_in: int | None = None) -> VerlReward:
    """A VerlReward unpickled: one per process and original, so that a copy asks the server how it runs, handles
    the leftovers and decides the step offset once per process, not once per response (and keeps its connection).
    A `step=` callable is unpickled anew each time, a copy of its own then, and so is a copy made in the original's
    own process (`made_in`: `copy.deepcopy`, a pickle read back), which its caller takes for an object of its own."""
    shared = not callable(step) and made_in is not None and made_in != os.getpid()
    key = (os.getpid(), url, complete, step, failed_as, max_workers, tuple(validation_splits), started)
    if shared and (held := _COPIES.get(key)) is not None:
        return held
    reward = VerlReward(url, complete=complete, step=step, failed_as=failed_as, max_workers=max_workers,
                        validation_splits=validation_splits)
    if started is not None:  # the original's: its training began then, whenever this copy was made
        reward.stepper.started, reward.batch_stepper.started = started
    return _COPIES.setdefault(key, reward) if shared else reward


def _last_taken(client: AmarisClient) -> int:
    """The run's last step that takes no more rollouts: its last complete step, or a later one the server still
    completes (a crashed run's last batch, its judgements in flight: the server holds it, so the run's status
    does not count it yet); -1 when there is none."""
    try:
        latest = client.rubric_status().step  # the run's last complete step
    except ServeError as exc:
        if exc.status != 404:  # 404: no step is complete yet
            raise
        latest = -1
    return max([latest, *(held.step for held in client.health().open if held.state != "open")])


def _not_taken(exc: BaseException) -> bool:
    """Whether a failed request is one the server did not take: it could not be reached (refused, unresolvable,
    timed out, dropped) or was stopping. (One that reached a server that died before journaling it is one too: the
    server, asked about the step, tells from what it holds.)"""
    return isinstance(exc, httpx.TransportError) or (isinstance(exc, ServeError) and exc.status == 503)


def _evaluating(kwargs: dict[str, Any]) -> bool:
    """Whether TRL calls for its evaluation: its model is in eval mode (TRL passes log_metric, a method of the
    trainer)."""
    trainer = getattr(kwargs.get("log_metric"), "__self__", None)
    return getattr(getattr(trainer, "model", None), "training", True) is False


def _verl_step(info: dict[str, Any]) -> int | None:
    return _integer(info.get(VERL_STEP))


def _dataset_metadata(fields: dict[str, Any]) -> dict[str, Any]:
    """A dataset's fields as a rollout's metadata, those named as the server reads a request's metadata about the
    step and the training renamed (`dataset_current_step`, `dataset_total_steps`, ...): a dataset's `current_step`
    was taken for the training step, a `total_steps` that is not a number was a 422 on every call, and an
    `other_context` became the training context every agent reads."""
    return {(DATASET_PREFIX + k if k in METADATA_FIELDS else k): v for k, v in fields.items()}


def _verl_body(data_source: Any, solution_str: str, ground_truth: Any, info: dict[str, Any]) -> dict[str, Any]:
    prompt = info.get("question") or info.get("prompt")
    if prompt is None and info.get("raw_prompt") is not None:  # verl's agent loop: the prompt's chat messages
        prompt = _jsonable(info["raw_prompt"])
    prompt = prompt or ""
    body: dict[str, Any] = {"prompt": prompt if isinstance(prompt, str | list) else str(prompt),
                            "response": solution_str, "reference": _jsonable(ground_truth),
                            "metadata": {"data_source": _jsonable(data_source),
                                         **_dataset_metadata({k: v for k, v in info.items()
                                                              if k != VERL_STEP and k not in VERL_INTERNAL})}}
    if isinstance(info.get("index"), str | int) and not isinstance(info.get("index"), bool):
        body["instance_id"] = str(info["index"])
    return body
