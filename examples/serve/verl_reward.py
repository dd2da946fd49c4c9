"""verl's custom reward function over `amaris serve`.

In training, point verl at this file and set the server's URL in the reward workers' environment:

    AMARIS_SERVE_URL=http://127.0.0.1:8780 python -m verl.trainer.main_ppo ... \
        custom_reward_function.path=examples/serve/verl_reward.py custom_reward_function.name=compute_score

verl calls compute_score(data_source, solution_str, ground_truth, extra_info) once per response. The
step comes from extra_info["global_steps"] (verl's reward loop sets it); put the question into
extra_info["question"] in your data preprocessing so the judge sees the prompt. With several reward
workers, start the server with --rollouts-per-step N (N = batch size x responses per prompt) so it
completes each step itself.

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
from typing import Any

from amaris_cli.serve.adapters import VerlReward

ROWS = Path(__file__).resolve().parent.parent / "trainers" / "verl" / "2.jsonl"
_reward = VerlReward(os.environ.get("AMARIS_SERVE_URL", "http://127.0.0.1:8780"))


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  **kwargs: Any) -> float:
    return _reward(data_source, solution_str, ground_truth, extra_info, **kwargs)


def main() -> None:
    global _reward
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("AMARIS_SERVE_URL", "http://127.0.0.1:8780"))
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--first-step", type=int, default=1)  # verl counts steps from 1
    args = parser.parse_args()

    _reward = VerlReward(args.url)
    rows = [json.loads(line) for line in ROWS.read_text().splitlines()]
    for step in range(args.first_step, args.first_step + args.steps):
        scores = [compute_score("openai/gsm8k", r["output"], r["gts"],
                                {"index": i, "split": "train", "question": r["input"], "global_steps": step})
                  for i, r in enumerate(rows)]
        print(f"step {step}: scores {scores}", flush=True)
    _reward.finish()
    last = args.first_step + args.steps - 1
    status = _reward.client.rubric_updated(last, timeout=600)
    print(f"step {last}: evolution {status.state}, rubric version now {status.latest_version}", flush=True)


if __name__ == "__main__":
    main()
