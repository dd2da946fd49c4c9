"""OpenRLHF's remote reward model, served by `amaris serve`.

In training, start the server so that it closes a step after each training batch's responses, and give
OpenRLHF its `/get_reward` route as the remote reward model:

    amaris serve --run runs/served --rollouts-per-step 512      # rollout_batch_size x n_samples_per_prompt
    python -m openrlhf.cli.train_ppo_ray ... --reward.remote_url http://127.0.0.1:8780/get_reward \
        --data.label_key answer

After each response, OpenRLHF's rollout workers POST `{"query": [prompt + response], "prompts": [prompt],
"labels": [label]}` (the response decoded with the special tokens kept, so an end-of-sequence marker may
end it; the label from `--data.label_key`) and read `rewards` from the answer; amaris answers one reward
per query (`{"rewards", "scores", "extra_logs": {"judge_failed", "amaris_step"}}`; OpenRLHF logs the extra
logs as metrics). The request names no step: each
response joins the server's open step, which `--rollouts-per-step` closes (without it the route refuses).
A response the judge could not score fails the request (OpenRLHF retries it, then leaves the sample
without a reward) unless the server runs with `--on-error neutral`.

This script needs no OpenRLHF: it posts the requests OpenRLHF posts, one per response, several at a time
as its rollout workers do, for the rollouts of examples/math (16 a step), and reads the answers as
OpenRLHF reads them:

    amaris init runs/served --config examples/amaris.toml
    amaris serve --run runs/served --judge auto --rollouts-per-step 16 &
    python examples/serve/openrlhf_reward.py --url http://127.0.0.1:8780 --steps 2
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from amaris_cli.serve.client import AmarisClient

STEPS = Path(__file__).resolve().parent.parent / "math"
TEMPLATE = "[user] {question}\n[assistant] "  # a chat template's text around the question
EOS = "<eos>"  # OpenRLHF decodes with the special tokens kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8780")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()

    client = AmarisClient(args.url)
    per_step = client.health().rollouts_per_step
    if not per_step:
        raise SystemExit("start amaris serve with --rollouts-per-step N: OpenRLHF's requests name no step")
    with httpx.Client(base_url=args.url, timeout=180) as http, ThreadPoolExecutor(max_workers=8) as workers:

        def remote_reward(row: dict) -> tuple[float, int]:
            prompt = TEMPLATE.format(question=row["input"])
            body = {"query": [prompt + row["output"] + EOS], "prompts": [prompt], "labels": [row["supplemental_context"]]}
            answer = http.post("/get_reward", json=body)
            answer.raise_for_status()
            read = answer.json()  # what OpenRLHF reads: the reward, and the extra logs
            return read["rewards"][0], int(read["extra_logs"]["amaris_step"][0])

        steps = set()
        for batch in range(args.steps):
            rows = [json.loads(line) for line in (STEPS / f"step-{batch % 6:03d}.jsonl").read_text().splitlines()]
            rows = (rows * (per_step // len(rows) + 1))[:per_step]  # one training batch
            answers = list(workers.map(remote_reward, rows))
            steps |= {step for _, step in answers}
            print(f"batch {batch}: rewards {[reward for reward, _ in answers]}", flush=True)
    status = client.rubric_updated(max(steps), timeout=600)
    print(f"step {status.step}: evolution {status.state}, rubric version now {status.latest_version}", flush=True)


if __name__ == "__main__":
    main()
