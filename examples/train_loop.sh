#!/usr/bin/env bash
# amaris between training steps: a fake trainer driven through N steps.
#
#   examples/train_loop.sh [--mode async|sync|score-only|trainer-only] [--steps N] [--train-seconds S]
#                          [--judge-latency S] [--run DIR] [--prestart]
#
# Each step the "trainer" generates rollouts (here: it copies an example step file), hands them to
# amaris for rewards, reads the rewards and trains (here: it sleeps --train-seconds). Modes:
#   async         the paper's online mode: `score --lag 1 --rewards` on the critical path, then
#                 `evolve &` runs in the background while the trainer trains. Step t is scored with
#                 rubric version t-1, which the evolution of step t-2 wrote a whole step earlier.
#   sync          `score`, then `evolve` in the foreground: each step uses the rubric of the step before.
#   score-only    rewards from the initial rubric, no evolution (`score --rubric-version 0`).
#   trainer-only  no amaris at all: the baseline the other modes add to.
# --prestart starts each step's `amaris score` while the step before trains, reading its rollouts
# through a pipe that delivers them once the trainer has written them: the process start-up (Python,
# config, and the openai SDK, which amaris imports while it waits for its input) is then done before
# the rollouts exist, and the step's critical path is only the judge and writing the rewards.
# Without an OpenAI-compatible endpoint (OPENAI_BASE_URL) the script starts amaris's rule-based
# sim-judge on 127.0.0.1 (not an LLM) with --judge-latency seconds per answer.
# Prints one line per step: "step T: W.WW s" (wall time of the whole step), then the totals.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
amaris=${AMARIS:-amaris}
if ! command -v "$amaris" >/dev/null 2>&1; then amaris="$root/.venv/bin/amaris"; fi
mode=async steps=6 train=8 latency=1 run="" prestart=0
while [ $# -gt 0 ]; do
  case "$1" in
    --mode) mode=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --train-seconds) train=$2; shift 2 ;;
    --judge-latency) latency=$2; shift 2 ;;
    --run) run=$2; shift 2 ;;
    --prestart) prestart=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
case "$mode" in async|sync|score-only|trainer-only) ;; *) echo "--mode: async, sync, score-only or trainer-only" >&2; exit 2 ;; esac
work=$(mktemp -d)
run=${run:-$work/run}
judge_pid="" scorer="" evolutions=()
cleanup() {
  status=$?
  if [ "$status" != 0 ] && [ -s "$work/evolve.log" ]; then echo "background evolutions said:" >&2; cat "$work/evolve.log" >&2; fi
  [ -z "$scorer" ] || kill "$scorer" 2>/dev/null || true
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

score_flags() {  # how each mode scores a step
  case "$mode" in
    async) echo --lag 1 ;;
    sync) echo --lag 0 ;;
    score-only) echo --rubric-version 0 ;;
  esac
}
start_score() {  # --prestart: step $1's score, started now, reads the rollouts once they are written
  local t=$1 rollouts="$work/rollouts-$1.jsonl"
  # shellcheck disable=SC2046
  "$amaris" score <(until [ -e "$rollouts.written" ]; do sleep 0.02; done; cat "$rollouts") --run "$run" \
    --step "$t" $(score_flags) --rewards "$work/rewards-$t.jsonl" --quiet &
  scorer=$!
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
total_start=$(now)
for t in $(seq 0 $((steps - 1))); do
  start=$(now)
  if [ "$prestart" = 1 ] && [ "$mode" != trainer-only ] && [ "$t" = 0 ]; then start_score 0; fi
  # The trainer generates step t's rollouts.
  rollouts="$work/rollouts-$t.jsonl"
  cp "$root/examples/math/step-$(printf %03d $((t % 6))).jsonl" "$rollouts"
  touch "$rollouts.written"
  rewards="$work/rewards-$t.jsonl"
  if [ "$mode" = trainer-only ]; then
    printf '{"reward": 0.5}\n' > "$rewards"
  elif [ "$prestart" = 1 ]; then
    wait "$scorer"; scorer=""
  else
    # shellcheck disable=SC2046
    "$amaris" score "$rollouts" --run "$run" --step "$t" $(score_flags) --rewards "$rewards" --quiet
  fi
  case "$mode" in
    async)
      "$amaris" evolve --run "$run" --step "$t" --quiet 2>>"$work/evolve.log" &
      evolutions+=($!) ;;
    sync)
      "$amaris" evolve --run "$run" --step "$t" --quiet ;;
  esac
  if [ "$prestart" = 1 ] && [ "$mode" != trainer-only ] && [ $((t + 1)) -lt "$steps" ]; then start_score $((t + 1)); fi
  # The trainer reads the rewards and trains on them.
  python3 -c 'import json, sys; rs = [json.loads(l)["reward"] for l in open(sys.argv[1])]; print(f"  trainer: {len(rs)} rewards", file=sys.stderr)' "$rewards"
  sleep "$train"
  echo "step $t: $(since "$start") s"
done
for pid in "${evolutions[@]}"; do wait "$pid"; done  # the last evolutions finish after training ends
echo "total: $(since "$total_start") s for $steps steps ($mode)"
if [ "$mode" != trainer-only ]; then
  case "$run" in
    "$work"/*) echo "run directory: $run (removed on exit; pass --run DIR to keep it)" >&2 ;;
    *) echo "run directory: $run" >&2 ;;
  esac
fi
