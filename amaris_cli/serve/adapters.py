"""Reward functions for trainers that call `amaris serve`.

TRL (GRPO): `reward_funcs=[TRLReward(url)]`, called as `reward_func(prompts, completions, **kwargs)`
with prompts and completions as strings or chat message lists and the dataset's other columns as
keyword lists; returns one reward per completion, None for a completion the judge could not score.
TRL reads None as NaN and sums its reward functions with nansum: with other reward functions the
completion gets theirs, but when this is the only one its reward is 0.0 (TRL only warns), so serve
with `--on-error neutral` when a failure should have a deliberate value.

verl: a `custom_reward_function` file whose `compute_score = VerlReward(url)`, called as
`compute_score(data_source, solution_str, ground_truth, extra_info)`; returns a float.

The step: TRL's `trainer_state.global_step` (passed by recent TRL versions), verl's
`extra_info["global_steps"]` (verl's reward loop puts it there), else `step=` given to the adapter (an
int or a function returning one); TRL without either counts its calls.

Completing steps (`complete`): "auto" (default) leaves it to the server when it was started with
`--rollouts-per-step` and otherwise completes step t when the first rollout of a later step is scored
("on_next_step"; call `.finish()` after the last step); "each_call" completes the step after every
call (TRL, one call per step); "never" leaves it to you (`AmarisClient.rollouts_complete`). Several
processes calling one server should leave it to the server (`--rollouts-per-step`): one process cannot
know that the others' rollouts of a step are in. In sync mode the server must complete steps itself
(its answers wait for the step's evolution).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import orjson

from amaris_cli.serve.api import ScoreResponse
from amaris_cli.serve.client import DEFAULT_URL, AmarisClient

Complete = Literal["auto", "on_next_step", "each_call", "never"]
StepSource = int | Callable[[], int] | None
TRL_INTERNAL = {"trainer_state", "completion_ids", "log_extra", "log_metric"}
REFERENCE_COLUMNS = ("reference", "ground_truth", "solution", "answer", "label", "target", "gts")
INSTANCE_COLUMNS = ("instance_id", "example_id", "uid", "id")
VERL_STEP_KEYS = ("global_steps", "global_step", "current_step", "step")


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


class _Stepper:
    """Which step the rollouts of a call belong to, and when to complete a step."""

    def __init__(self, client: AmarisClient, complete: Complete, step: StepSource, one_at_a_time: bool) -> None:
        self.client = client
        self.mode = complete
        self.step = step
        self.one_at_a_time = one_at_a_time  # verl: one response per call
        self.calls = 0
        self.pending: int | None = None  # the step scored last and not yet completed
        self.sync = False
        self.resolved = False

    def resolve_mode(self) -> Complete:
        """Ask the server once how it runs: the completion mode "auto" stands for, and whether it is sync."""
        if not self.resolved:
            health = self.client.health()
            self.sync = health.mode == "sync"
            if self.sync and (self.one_at_a_time or not health.rollouts_per_step):
                # A sync answer waits until the step is complete and evolved: every rollout of the step
                # must be in flight at once, and the server must know when the last one is in.
                raise RuntimeError(
                    "the amaris server runs in sync mode, whose answers wait for the step's evolution: "
                    + ("this trainer scores one response at a time; serve in async mode" if self.one_at_a_time else
                       "start it with --rollouts-per-step N (N: the completions of one reward call)"))
            if self.mode == "auto":
                self.mode = "never" if health.rollouts_per_step else "on_next_step"
            self.resolved = True
        return self.mode

    def current(self, found: int | None) -> int:
        self.calls += 1
        if found is not None:
            return found
        if callable(self.step):
            return int(self.step())
        if self.step is not None:
            return int(self.step)
        return self.calls - 1

    def before(self, step: int) -> None:
        if self.resolve_mode() == "on_next_step" and self.pending is not None and step > self.pending:
            self.client.rollouts_complete(self.pending)
            self.pending = None

    def after(self, step: int) -> None:
        if self.mode == "each_call":
            self.client.rollouts_complete(step)
        elif self.mode == "on_next_step":
            self.pending = step if self.pending is None else max(self.pending, step)

    def finish(self) -> None:
        if self.pending is not None:
            self.client.rollouts_complete(self.pending)
            self.pending = None


class _ServedReward:
    """What both reward functions share: the client, the stepper, and completing the last step."""

    client: AmarisClient
    stepper: _Stepper

    def finish(self) -> None:
        """Complete the last step (with complete="on_next_step")."""
        self.stepper.finish()


class TRLReward(_ServedReward):
    """TRL's reward function signature over `amaris serve`."""

    def __init__(self, url: str = DEFAULT_URL, *, complete: Complete = "auto", step: StepSource = None,
                 reference_columns: Sequence[str] = REFERENCE_COLUMNS, instance_column: str | None = None,
                 max_workers: int = 32, client: AmarisClient | None = None, name: str = "amaris") -> None:
        self.client = client or AmarisClient(url)
        self.stepper = _Stepper(self.client, complete, step, one_at_a_time=False)
        self.reference_columns = tuple(reference_columns)
        self.instance_column = instance_column
        self.max_workers = max_workers
        self.__name__ = name  # TRL names the reward in its logs after this

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        state = kwargs.get("trainer_state")
        step = self.stepper.current(getattr(state, "global_step", None))
        self.stepper.before(step)
        columns = {k: v for k, v in kwargs.items()
                   if k not in TRL_INTERNAL and isinstance(v, list | tuple) and len(v) == len(completions)}
        bodies = [self._rollout(i, prompts, completions, columns) for i in range(len(completions))]

        def one(body: dict[str, Any]) -> ScoreResponse:
            return self.client.score(step=step, **body)

        # In sync mode no answer comes before the step's last rollout is in: send them all at once.
        workers = len(bodies) if self.stepper.sync else min(self.max_workers, len(bodies))
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            answers = list(pool.map(one, bodies))
        self.stepper.after(step)
        return [a.score for a in answers]

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
        body["metadata"] = {k: v for k, v in row.items() if v is not None}
        return body


class VerlReward(_ServedReward):
    """verl's `compute_score(data_source, solution_str, ground_truth, extra_info)` over `amaris serve`.
    The prompt is `extra_info["question"]` or `["prompt"]` when the dataset puts it there (verl passes
    the response only); the instance is `extra_info["index"]`."""

    def __init__(self, url: str = DEFAULT_URL, *, complete: Complete = "auto", step: StepSource = None,
                 failed_as: float | None = None, client: AmarisClient | None = None) -> None:
        self.client = client or AmarisClient(url)
        self.stepper = _Stepper(self.client, complete, step, one_at_a_time=True)
        self.failed_as = failed_as
        self.__name__ = "compute_score"

    def __call__(self, data_source: Any, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None,
                 **kwargs: Any) -> float:
        info = {k: _jsonable(v) for k, v in (extra_info or {}).items()}
        found = next((info[k] for k in VERL_STEP_KEYS if isinstance(info.get(k), int)), None)
        if found is None and self.stepper.step is None:
            raise ValueError("verl gave no step: compute_score needs extra_info['global_steps'] (verl's reward loop "
                             "passes it) or VerlReward(step=...)")
        step = self.stepper.current(found)
        self.stepper.before(step)
        prompt = info.get("question") or info.get("prompt") or ""
        body: dict[str, Any] = {"prompt": prompt if isinstance(prompt, str | list) else str(prompt),
                                "response": solution_str, "reference": _jsonable(ground_truth),
                                "metadata": {"data_source": _jsonable(data_source),
                                             **{k: v for k, v in info.items() if k not in VERL_STEP_KEYS}}}
        if isinstance(info.get("index"), str | int) and not isinstance(info.get("index"), bool):
            body["instance_id"] = str(info["index"])
        answer = self.client.score(step=step, **body)
        self.stepper.after(step)
        if answer.score is not None and math.isfinite(answer.score):
            return float(answer.score)
        if self.failed_as is not None:
            return float(self.failed_as)
        raise RewardFailed(f"amaris could not score rollout {answer.id} of step {step}: {answer.error}; "
                           "start the server with --on-error neutral, or give VerlReward(failed_as=...)")
