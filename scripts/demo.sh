#!/usr/bin/env bash
# `make demo`: the classifier example trained two ways on this machine, results side by side.
#   1. Horovod ring-allreduce, 2 ranks (horovodrun --gloo)
#   2. ParameterServerStrategy, chief + 2 workers + 1 ps (tfdist launch)
# then `tfdist report` draws every run of $LOGDIR on one page: $LOGDIR/report.html, and
# `saved_model_cli run` serves one test digit from the model the Horovod run exported to $EXPORT.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
export PATH="$here/.venv/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
LOGDIR="${LOGDIR:-runs}"
EPOCHS="${EPOCHS:-8}"
EXPORT="${EXPORT:-exports/classifier/1}"
log="$(mktemp -d)"
trap 'rm -rf "$log"' EXIT

# TensorFlow's C++ start-up lines (oneDNN, CUDA probing) say nothing about the demo.
quiet() { grep -v -E "^(\[[^]]*\] *)?(<std(out|err)>:)?(I0000|E0000|W0000|WARNING: All log messages|To enable the following instructions)|UserWarning: To make it possible|warnings.warn\(" || true; }

# serve DIR: one test digit through the SavedModel at DIR with TensorFlow's own saved_model_cli (no
# tfdist, no Horovod), and the prediction printed. `bash scripts/demo.sh serve DIR` does only this.
serve() {
  local export="$1" input
  python - "$log/digit.npy" 2>"$log/digit.err" <<'PY' || { quiet <"$log/digit.err" >&2; echo "reading a test digit failed" >&2; exit 1; }
import sys

import numpy as np

sys.path.insert(0, "examples")
from classifier import load_data  # the example's own split: this is a test image

_, (x_test, y_test) = load_data(None)
np.save(sys.argv[1], x_test[:1])
print(y_test[0], file=open(sys.argv[1] + ".label", "w"))
PY
  input="$(saved_model_cli show --dir "$export" --tag_set serve --signature_def serving_default 2>/dev/null \
    | sed -n "s/^  inputs\['\(.*\)'\] tensor_info:$/\1/p" | head -n1)"
  saved_model_cli run --dir "$export" --tag_set serve --signature_def serving_default \
    --inputs "$input=$log/digit.npy" --outdir "$log/served" --overwrite >"$log/serve.out" 2>&1 \
    || { quiet <"$log/serve.out" >&2; echo "saved_model_cli run failed; see above" >&2; exit 1; }
  python - "$log/served/output_0.npy" "$(cat "$log/digit.npy.label")" "$export" <<'PY'
import sys

import numpy as np

logits = np.load(sys.argv[1])[0]
print(f"\nServed by saved_model_cli from {sys.argv[3]}: predicted digit {int(logits.argmax())} "
      f"(label {sys.argv[2]}); logits {np.array2string(logits, precision=2, max_line_width=200)}")
PY
}

run() {  # run NAME COMMAND...: stream the filtered output, keep the RESULT line
  local name="$1"; shift
  printf '\n=== %s: %s\n' "$name" "$*"
  "$@" 2>&1 | tee "$log/$name.out" | quiet
}

if [ "${1:-}" = serve ]; then serve "${2:?usage: scripts/demo.sh serve EXPORT_DIR}"; exit; fi

run horovod horovodrun -np 2 -H localhost:2 --gloo python examples/classifier.py \
  --epochs "$EPOCHS" --logdir "$LOGDIR" --export "$EXPORT"
run parameter_server tfdist launch --workers 2 --ps 1 -- python examples/classifier.py \
  --epochs "$EPOCHS" --logdir "$LOGDIR"

printf '\n=== Results (8x8 digits, %s epochs, batch 32 per worker)\n' "$EPOCHS"
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

# One test digit served from the Horovod run's export by saved_model_cli.
grep -q "RESULT .* export=" "$log/horovod.out" || { echo "the horovod run exported nothing; see above" >&2; exit 1; }
serve "$EXPORT"
