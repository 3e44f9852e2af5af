#!/usr/bin/env bash
# `make demo`: the classifier example trained two ways on this machine, results side by side.
#   1. Horovod ring-allreduce, 2 ranks (horovodrun --gloo)
#   2. ParameterServerStrategy, chief + 2 workers + 1 ps (tfdist launch)
# then `tfdist report` draws every run of $LOGDIR on one page: $LOGDIR/report.html.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
export PATH="$here/.venv/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
LOGDIR="${LOGDIR:-runs}"
EPOCHS="${EPOCHS:-8}"
log="$(mktemp -d)"
trap 'rm -rf "$log"' EXIT

# TensorFlow's C++ start-up lines (oneDNN, CUDA probing) say nothing about the demo.
quiet() { grep -v -E "^(\[[^]]*\] *)?(<std(out|err)>:)?(I0000|E0000|W0000|WARNING: All log messages|To enable the following instructions)|UserWarning: To make it possible|warnings.warn\(" || true; }

run() {  # run NAME COMMAND...: stream the filtered output, keep the RESULT line
  local name="$1"; shift
  printf '\n=== %s: %s\n' "$name" "$*"
  "$@" 2>&1 | tee "$log/$name.out" | quiet
}

run horovod horovodrun -np 2 -H localhost:2 --gloo python examples/classifier.py \
  --epochs "$EPOCHS" --logdir "$LOGDIR"
run parameter_server tfdist launch --workers 2 --ps 1 -- python examples/classifier.py \
  --epochs "$EPOCHS" --logdir "$LOGDIR"

printf '\n=== Results (scikit-learn digits, %s epochs, batch 32 per worker)\n' "$EPOCHS"
printf '%-18s %-8s %-14s %-12s %-12s %-14s %s\n' strategy workers test_accuracy test_loss examples/s train_seconds \
  "s_to_val_acc_0.9"
for name in horovod parameter_server; do
  line="$(grep -o 'RESULT .*' "$log/$name.out" | tail -n1)"
  [ -n "$line" ] || { echo "$name: no RESULT line; see the output above" >&2; exit 1; }
  field() { printf '%s' "$line" | tr ' ' '\n' | grep "^$1=" | cut -d= -f2; }
  printf '%-18s %-8s %-14s %-12s %-12s %-14s %s\n' "$(field strategy)" "$(field workers)" \
    "$(field test_accuracy)" "$(field test_loss)" "$(field examples_per_second)" "$(field train_seconds)" \
    "$(field time_to_target_s)"
done
printf '\nTensorBoard: .venv/bin/tensorboard --logdir %s  (then open http://localhost:6006;\n' "$LOGDIR"
printf 'the HParams tab compares the runs by strategy, workers and batch size)\n'

# One page comparing every run of $LOGDIR (figures drawn with matplotlib, embedded in the HTML).
report="$(tfdist report "$LOGDIR" --out "$LOGDIR/report.html" 2>"$log/report.err")" \
  || { quiet <"$log/report.err" >&2; echo "tfdist report failed; see above" >&2; exit 1; }
printf '\nReport: %s  (open it in a browser; `tfdist report %s --out report.png` for one image)\n' \
  "$report" "$LOGDIR"
