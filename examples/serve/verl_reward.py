"""verl's custom reward function over `amaris serve`.

In training, point verl at this file and set the server's URL in the reward workers' environment:

    AMARIS_SERVE_URL=http://127.0.0.1:8780 python -m verl.trainer.main_ppo ... \
        reward.custom_reward_function.path=examples/serve/verl_reward.py \
        reward.custom_reward_function.name=compute_score

verl scores validation with this same function: a response whose extra_info["split"] is "test" (what verl's
preprocessing scripts write for the test set; also "val", "validation", ...) is judged by POST /validate, in no
training step (RUN/validation/). A validation set without such a split would join the next training step: add
it, or run with trainer.val_before_train=False (and trainer.test_freq=-1, verl's default).

`compute_score(data_source, solution_str, ground_truth, extra_info)` scores one response: verl's reward
loop (naive, dapo, the rate-limited one) and the legacy NaiveRewardManager, DAPORewardManager and
PrimeRewardManager call it so. The legacy BatchRewardManager calls `compute_score_batch` (set
`name=compute_score_batch`) with a whole batch, which becomes one amaris step, completed after the call.

The step: verl's reward loop, streaming with the rollout, puts `global_steps` into extra_info (the
version of the weights that generated the response); the legacy managers pass none. Without one, each
response joins the server's open step: start the server with `--rollouts-per-step N` (N = train_batch_size
x rollout.n) so that it closes each step after its N-th response. Several reward workers need that too
(one worker cannot know that the others' responses are in). Put the question into extra_info["question"]
in your data preprocessing so the judge sees the prompt (verl passes the response only).

This script needs no verl: it calls compute_score the way verl's reward manager does, on the rollouts of
examples/trainers/verl/2.jsonl, for a few steps:

    amaris init runs/served --config examples/amaris.toml
    amaris serve --run runs/served --judge auto &
    python examples/serve/verl_reward.py --url http://127.0.0.1:8780 --steps 2
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from amaris_cli.serve.adapters import VerlReward

ROWS = Path(__file__).resolve().parent.parent / "trainers" / "verl" / "2.jsonl"

# An object, not a function of this file: verl loads this file under a name no other process can import,
# and the prime manager pickles compute_score for its process pool (VerlReward pickles by its settings).
compute_score = VerlReward(os.environ.get("AMARIS_SERVE_URL", "http://127.0.0.1:8780"))
compute_score_batch = compute_score.batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("AMARIS_SERVE_URL", "http://127.0.0.1:8780"))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--first-step", type=int, default=1)  # verl counts steps from 1
    args = parser.parse_args()

    reward = VerlReward(args.url)
    rows = [json.loads(line) for line in ROWS.read_text().splitlines()]
    for step in range(args.first_step, args.first_step + args.steps):
        scores = [reward(data_source="openai/gsm8k", solution_str=r["output"], ground_truth=r["gts"],
                         extra_info={"index": i, "split": "train", "question": r["input"], "global_steps": step})
                  for i, r in enumerate(rows)]
        print(f"step {step}: scores {scores}", flush=True)
    reward.finish()
    last = args.first_step + args.steps - 1
    status = reward.client.rubric_updated(last, timeout=600)
    print(f"step {last}: evolution {status.state}, rubric version now {status.latest_version}", flush=True)


if __name__ == "__main__":
    from amaris_cli.serve.client import ServeError

    try:
        main()
    except ServeError as exc:  # 409: the server's run already holds the steps this script posts (an earlier try)
        raise SystemExit(f"error: {exc}" + ("; start the server on a fresh run, or pass --first-step N"
                                            if exc.status == 409 else "")) from None
