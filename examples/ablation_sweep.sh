#!/usr/bin/env bash
# Ablation sweep over the example data: full memory, static only, dynamic only, no memory.
#
# The first run calls the judge; the other three replay it, so the model is called again only
# for requests whose inputs the ablation changes (from the first update on), and the rest is
# answered from the record. Usage (from the repository root, with amaris installed):
#
#   bash examples/ablation_sweep.sh                 # judge: the configured endpoint, else the sim-judge
#   OUT=runs/my-sweep JUDGE=endpoint bash examples/ablation_sweep.sh
set -euo pipefail

AMARIS=${AMARIS:-amaris}
JUDGE=${JUDGE:-auto}
OUT=${OUT:-runs/sweep}
INPUT=${INPUT:-examples/math}
CONFIG=${CONFIG:-examples/amaris.toml}

rm -rf "$OUT"
mkdir -p "$OUT"
$AMARIS init "$OUT/full" --config "$CONFIG"
$AMARIS loop "$INPUT" --run "$OUT/full" --judge "$JUDGE" --quiet
$AMARIS replay "$OUT/full" --out "$OUT/static-only" --no-dynamic --judge "$JUDGE" --quiet
$AMARIS replay "$OUT/full" --out "$OUT/dynamic-only" --no-static --judge "$JUDGE" --quiet
$AMARIS replay "$OUT/full" --out "$OUT/no-memory" --no-static --no-dynamic --judge "$JUDGE" --quiet
$AMARIS compare "$OUT/full" "$OUT/static-only" "$OUT/dynamic-only" "$OUT/no-memory" "$@"
