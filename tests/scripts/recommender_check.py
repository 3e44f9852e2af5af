"""The checks of examples/recommender.py that need TensorFlow but no cluster, in one process (one
TensorFlow start-up for all of them), for tests/examples/test_recommender.py.

    python recommender_check.py EXPORT_DIR USERS ITEMS TEST_EXAMPLES   # prints one JSON object

1. Reload the export in this fresh process before tfdist is imported (``tf.saved_model.load``): the
   variables it holds (the item table merged back into one) and whether tfdist or Horovod was needed.
2. Score the example's own test pairs through the reloaded ``serving_default``: the AUC (numpy, rank
   based), so the weights served are the trained ones.
3. Call the example's ``main`` with each bad command line of ``BAD_FLAGS``: its exit code and stderr
   (``None``: it did not exit, which fails the test).
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recommender.py"
BAD_FLAGS = {
    "shards-zero": ["--shards", "0"],
    "items-zero": ["--items", "0"],
    "items-word": ["--items", "many"],
    "shards-on-horovod": ["--backend", "horovod", "--shards", "2"],
    "shards-on-single": ["--backend", "single", "--shards", "2"],
    "noise": ["--noise", "0.5"],
    "topics": ["--topics", "1"],
    "lr": ["--lr", "-1"],
    "backend": ["--backend", "horovd"],
    "shards-under-auto-single": ["--shards", "2"],  # auto picks single here (no cluster): refused, not dropped
}


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """The area under the ROC curve: the chance that a clicked pair outscores an unclicked one."""
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    positive = labels > 0.5
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def main() -> None:
    export, users, items, examples = sys.argv[1], *map(int, sys.argv[2:5])
    loaded = tf.saved_model.load(export)
    result = {"variables": sorted([v.name, list(v.shape)] for v in loaded.variables),
              "tfdist_imported": "tfdist" in sys.modules, "horovod_imported": "horovod" in sys.modules}
    spec = importlib.util.spec_from_file_location("recommender", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)  # defines main(); runs nothing
    args = example.parse_args([])
    x, y = example.make_data(users, items, args.topics, examples, args.noise)
    serve = loaded.signatures["serving_default"]
    logits = serve(user_id=tf.constant(x["user_id"]), item_id=tf.constant(x["item_id"]))["output_0"].numpy()
    result["reloaded_auc"] = auc(y[:, 0], logits[:, 0])
    result["flags"] = {}
    for name, argv in BAD_FLAGS.items():
        err = io.StringIO()
        code = None
        with contextlib.redirect_stderr(err):
            try:
                example.main(argv)
            except SystemExit as exc:
                code = exc.code
        result["flags"][name] = {"code": code, "stderr": err.getvalue()}
    print("CHECK " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
