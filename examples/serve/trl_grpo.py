"""TRL's GRPO reward function over `amaris serve`.

In training (TRL installed):

    from trl import GRPOConfig, GRPOTrainer
    from amaris_cli.serve.adapters import TRLReward

    reward = TRLReward("http://127.0.0.1:8780")          # the URL `amaris serve` printed
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], args=GRPOConfig(...), train_dataset=dataset)
    trainer.train()

Each generation TRL makes is one amaris step (0, 1, 2, ... whatever steps_per_generation,
num_iterations and gradient accumulation are), completed as soon as the reward call returns, so its
evolution runs while TRL trains on it (README, "Client and trainer adapters").

This script needs no TRL: it calls the reward function the way GRPOTrainer calls it, with the
conversational rollouts of examples/trainers/trl_grpo.jsonl (prompts and completions as chat message
lists, the dataset's `solution` column as a keyword argument, `trainer_state.global_step`; without the
trainer itself, the global step names the amaris step), for a few steps, then waits for the last step's
rubric update:

    amaris init runs/served --config examples/amaris.toml
    amaris serve --run runs/served --judge auto &        # prints: amaris serve listening: http://127.0.0.1:8780
    python examples/serve/trl_grpo.py --url http://127.0.0.1:8780 --steps 3
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

from amaris_cli.serve.adapters import TRLReward

ROWS = Path(__file__).resolve().parent.parent / "trainers" / "trl_grpo.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8780")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--first-step", type=int, default=0)
    args = parser.parse_args()

    rows = [json.loads(line) for line in ROWS.read_text().splitlines()]
    reward = TRLReward(args.url)
    for step in range(args.first_step, args.first_step + args.steps):
        rewards = reward(
            prompts=[r["prompt"] for r in rows],
            completions=[r["completion"] for r in rows],
            solution=[r["solution"] for r in rows],  # a dataset column, as TRL passes it
            trainer_state=SimpleNamespace(global_step=step),
        )
        print(f"step {step}: rewards {rewards}", flush=True)
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
