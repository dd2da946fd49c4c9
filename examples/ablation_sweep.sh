#!/usr/bin/env bash
# Ablation sweep: full memory, static only, dynamic only, no memory, ending with `amaris compare`.
#
# The default data, examples/recurring, has one hack that recurs at 1 of 16 rollouts in every step: too
# rare for one step's evidence, visible in the memory. With the sim-judge, the arms with memory add a pitfall
# against it at step 2 and score it lower from step 3 on; the no-memory arm never does, so `compare` marks
# those steps "no: rubrics differ" and the rewards part. A real judge decides for itself.
#
# The first run calls the judge; the other three replay it, so the model is called again only for requests
# whose inputs the ablation changes, and the rest is answered from the record. Usage (from the repository
# root; amaris on PATH, else the project's .venv/bin/amaris that `make` installs, else AMARIS=...):
#
#   bash examples/ablation_sweep.sh                 # judge: the configured endpoint, else the sim-judge
#   OUT=runs/my-sweep JUDGE=endpoint INPUT=examples/math bash examples/ablation_sweep.sh
#   bash examples/ablation_sweep.sh --json          # arguments go to the final `amaris compare`
#
# Interrupted, the same command resumes in OUT: the arms already done are kept (not judged again). OUT is never
# deleted; one that holds something else, or a sweep of other settings, is refused.
set -euo pipefail

if [[ -z "${AMARIS:-}" ]]; then  # a command line of its own (e.g. "python -m amaris_cli") is taken as given
  AMARIS=amaris
  command -v amaris >/dev/null 2>&1 || AMARIS="$(dirname "$(cd "$(dirname "$0")" && pwd)")/.venv/bin/amaris"
fi
JUDGE=${JUDGE:-auto}
OUT=${OUT:-runs/sweep}
INPUT=${INPUT:-examples/recurring}
CONFIG=${CONFIG:-examples/amaris.toml}
if [[ -z "${TOTAL_STEPS:-}" && -d "$INPUT" ]]; then
  TOTAL_STEPS=$(find "$INPUT" -maxdepth 1 -name '*.jsonl' | wc -l)
fi
say() { echo "ablation_sweep.sh: $*" >&2; }

# Everything is checked before anything is written or sent to a judge.
case "$JUDGE" in endpoint|sim|auto) ;; *) say "JUDGE must be endpoint, sim or auto, not '$JUDGE'"; exit 2;; esac
[[ -e "$INPUT" ]] || { say "INPUT $INPUT does not exist"; exit 2; }
[[ -f "$CONFIG" ]] || { say "CONFIG $CONFIG is not a file"; exit 2; }
# (the arguments are amaris compare's: a typo is found now, not after the four arms)
$AMARIS compare "$@" --help >/dev/null || { say "the arguments are given to amaris compare: $*"; exit 2; }

# OUT is this sweep's: an interrupted sweep re-run with the same settings resumes it (each command resumes where it
# stopped); a directory that holds anything else is never written into, nor deleted.
STAMP="input=$INPUT config=$CONFIG total_steps=${TOTAL_STEPS:-} judge=$JUDGE"
if [[ -e "$OUT/.ablation-sweep" ]]; then
  if [[ "$(cat "$OUT/.ablation-sweep")" != "$STAMP" ]]; then
    say "$OUT holds a sweep of other settings ($(cat "$OUT/.ablation-sweep")): give another OUT, or delete it to start again"
    exit 2
  fi
  say "resuming the sweep in $OUT"
elif [[ -e "$OUT" && -n "$(ls -A "$OUT")" ]]; then
  say "$OUT exists and is not a sweep's output: give another OUT (nothing was written)"
  exit 2
else
  mkdir -p "$OUT"
  echo "$STAMP" > "$OUT/.ablation-sweep"
fi
ARM=
trap 'say "arm $ARM failed (exit $?); the arms before it are kept: re-run the same command to resume"' ERR

ARM=full
if [[ ! -f "$OUT/full/run.json" ]]; then
  rm -rf "$OUT/full"  # an init interrupted before it wrote run.json
  $AMARIS init "$OUT/full" --config "$CONFIG" ${TOTAL_STEPS:+--total-steps "$TOTAL_STEPS"}
fi
say "full: loop over $INPUT"
$AMARIS loop "$INPUT" --run "$OUT/full" --judge "$JUDGE" --quiet
ARM=static-only; say "static-only: replay of full with --no-dynamic"
$AMARIS replay "$OUT/full" --out "$OUT/static-only" --no-dynamic --judge "$JUDGE" --quiet
ARM=dynamic-only; say "dynamic-only: replay of full with --no-static"
$AMARIS replay "$OUT/full" --out "$OUT/dynamic-only" --no-static --judge "$JUDGE" --quiet
ARM=no-memory; say "no-memory: replay of full with --no-static --no-dynamic"
$AMARIS replay "$OUT/full" --out "$OUT/no-memory" --no-static --no-dynamic --judge "$JUDGE" --quiet
ARM=compare
$AMARIS compare "$OUT/full" "$OUT/static-only" "$OUT/dynamic-only" "$OUT/no-memory" "$@"
