#!/usr/bin/env bash
# Benchmark 7c on a quiet machine (the lead's TPU VM: 13 cores): `shardscope check --target` against
# JAX's AOT compile of the same step for the same slice, at 256 chips (tpu:v5p:8x8x4) and 1,024
# (tpu:v5p:8x8x16), for llama_adamw (Llama-3-8B-shaped FSDP x TP + AdamW) and moe (a short compile).
#
#   benchmarks/check_ratios_tpu_vm.sh            # both chip counts, 3 rounds each (~25 min)
#   CHIPS=256 benchmarks/check_ratios_tpu_vm.sh  # one chip count a call (a machine lent 10 min at a time)
#   ROUNDS=--quick benchmarks/check_ratios_tpu_vm.sh   # 1 round, no more (ROUNDS="--rounds 2": two)
#   PHASES=--no-phases ...                         # leave out the phase-by-phase child
#   PROGRAMS=moe CHIPS=1024 ...                    # one program (llama_adamw, moe)
#
# Writes benchmarks/results/check_ratios.json (rows of other chip counts already there are kept;
# OUT=FILE writes elsewhere) and prints `uptime` before and after; then
# `python -m benchmarks.render` rewrites BENCHMARKS.md's section 7c from it. Needs the tpu extra
# (libtpu) beside the venv's jax. Run nothing else on the machine meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
CHIPS=${CHIPS:-256,1024}
OUT=${OUT:-benchmarks/results/check_ratios.json}
PROGRAMS=${PROGRAMS:-llama_adamw,moe}
uptime
"$PYTHON" -c 'import jax; print("jax", jax.__version__)'
# shellcheck disable=SC2086  # ROUNDS is a flag or nothing
"$PYTHON" -m benchmarks.check_ratios --chips "$CHIPS" --programs "$PROGRAMS" --out "$OUT" ${ROUNDS:-} ${PHASES:-}
uptime
echo "wrote $OUT"
