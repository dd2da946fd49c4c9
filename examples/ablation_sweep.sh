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

rm -rf "$OUT"
mkdir -p "$OUT"
$AMARIS init "$OUT/full" --config "$CONFIG" ${TOTAL_STEPS:+--total-steps "$TOTAL_STEPS"}
$AMARIS loop "$INPUT" --run "$OUT/full" --judge "$JUDGE" --quiet
$AMARIS replay "$OUT/full" --out "$OUT/static-only" --no-dynamic --judge "$JUDGE" --quiet
$AMARIS replay "$OUT/full" --out "$OUT/dynamic-only" --no-static --judge "$JUDGE" --quiet
$AMARIS replay "$OUT/full" --out "$OUT/no-memory" --no-static --no-dynamic --judge "$JUDGE" --quiet
$AMARIS compare "$OUT/full" "$OUT/static-only" "$OUT/dynamic-only" "$OUT/no-memory" "$@"
