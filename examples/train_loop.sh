#!/usr/bin/env bash
# amaris between training steps: a fake trainer driven through N steps.
#
#   examples/train_loop.sh [--mode async|sync|score-only|trainer-only] [--steps N] [--train-seconds S]
#                          [--judge-latency S] [--run DIR]
#
# Each step the "trainer" generates rollouts (here: it copies an example step file), hands them to
# amaris for rewards, reads the rewards and trains (here: it sleeps --train-seconds). Modes:
#   async         the paper's online mode: `score --lag 1 --rewards` on the critical path, then
#                 `evolve &` runs in the background while the trainer trains. Step t is scored with
#                 rubric version t-1, which the evolution of step t-2 wrote a whole step earlier.
#   sync          `score`, then `evolve` in the foreground: each step uses the rubric of the step before.
#   score-only    rewards from the initial rubric, no evolution (`score --rubric-version 0`).
#   trainer-only  no amaris at all: the baseline the other modes add to.
# Without an OpenAI-compatible endpoint (OPENAI_BASE_URL) the script starts amaris's rule-based
# sim-judge on 127.0.0.1 (not an LLM) with --judge-latency seconds per answer.
# Prints one line per step: "step T: W.WW s" (wall time of the whole step), then the totals.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
amaris=${AMARIS:-amaris}
if ! command -v "$amaris" >/dev/null 2>&1; then amaris="$root/.venv/bin/amaris"; fi
mode=async steps=6 train=8 latency=1 run=""
while [ $# -gt 0 ]; do
  case "$1" in
    --mode) mode=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --train-seconds) train=$2; shift 2 ;;
    --judge-latency) latency=$2; shift 2 ;;
    --run) run=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
case "$mode" in async|sync|score-only|trainer-only) ;; *) echo "--mode: async, sync, score-only or trainer-only" >&2; exit 2 ;; esac
work=$(mktemp -d)
run=${run:-$work/run}
judge_pid="" evolutions=()
cleanup() {
  status=$?
  if [ "$status" != 0 ] && [ -s "$work/evolve.log" ]; then echo "background evolutions said:" >&2; cat "$work/evolve.log" >&2; fi
  [ -z "$judge_pid" ] || kill "$judge_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if [ "$mode" != trainer-only ] && [ -z "${OPENAI_BASE_URL:-}" ]; then
  "$amaris" sim-judge --port 0 --latency "$latency" 2>"$work/judge.log" &
  judge_pid=$!
  for _ in $(seq 100); do grep -q OPENAI_BASE_URL= "$work/judge.log" && break; sleep 0.1; done
  export OPENAI_BASE_URL=$(sed -n 's/.*OPENAI_BASE_URL=\(\S*\).*/\1/p' "$work/judge.log")
  export OPENAI_API_KEY=sim
  echo "judge: amaris's rule-based sim-judge at $OPENAI_BASE_URL (not an LLM), $latency s per answer" >&2
fi
[ "$mode" = trainer-only ] || "$amaris" init "$run" --config "$root/examples/amaris.toml" --total-steps "$steps" >&2

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
total_start=$(now)
for t in $(seq 0 $((steps - 1))); do
  start=$(now)
  # The trainer generates step t's rollouts.
  rollouts="$work/rollouts-$t.jsonl"
  cp "$root/examples/math/step-$(printf %03d $((t % 6))).jsonl" "$rollouts"
  rewards="$work/rewards-$t.jsonl"
  case "$mode" in
    async)
      "$amaris" score "$rollouts" --run "$run" --step "$t" --lag 1 --rewards "$rewards" --quiet
      "$amaris" evolve --run "$run" --step "$t" --quiet 2>>"$work/evolve.log" &
      evolutions+=($!) ;;
    sync)
      "$amaris" score "$rollouts" --run "$run" --step "$t" --rewards "$rewards" --quiet
      "$amaris" evolve --run "$run" --step "$t" --quiet ;;
    score-only)
      "$amaris" score "$rollouts" --run "$run" --step "$t" --rubric-version 0 --rewards "$rewards" --quiet ;;
    trainer-only)
      printf '{"reward": 0.5}\n' > "$rewards" ;;
  esac
  # The trainer reads the rewards and trains on them.
  python3 -c 'import json, sys; rs = [json.loads(l)["reward"] for l in open(sys.argv[1])]; print(f"  trainer: {len(rs)} rewards", file=sys.stderr)' "$rewards"
  sleep "$train"
  echo "step $t: $(since "$start") s"
done
for pid in "${evolutions[@]}"; do wait "$pid"; done  # the last evolutions finish after training ends
echo "total: $(since "$total_start") s for $steps steps ($mode)"
[ "$mode" = trainer-only ] || echo "run directory: $run (removed on exit; pass --run DIR to keep it)" >&2
