"""The Horovod jobs this folder's tests share: one ``horovodrun -np 2`` job per (Keras, what
``tf.keras`` is) runs every scenario that starts the same way, one after the other, each in its own
folder (``tests/scripts/hvd_train.py several``), so TensorFlow and Horovod start once, not once per
scenario. Each test reads the part it checks; a part's job runs the first time one is asked for.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import horovodrun

_LAZY = [f"lazy/{kind}" for kind in ("sequential", "subclassed", "functional")]
#: (the Keras of the models, what tf.keras is) -> the parts of its job
HOROVOD_PARTS: dict[tuple[str, str], list[str]] = {
    ("tf_keras", "tf_keras"): ["train", *_LAZY, "equivalence"],
    ("keras_3", "tf_keras"): ["train", *_LAZY],
    ("keras_3", "keras_3"): ["equivalence"],
    ("tf_keras", "keras_3"): ["equivalence"],
}


class HorovodJobs:
    """``jobs(keras, tf_keras_is, part)``: both ranks' ``rank<N>.json`` of ``part``;
    ``jobs.outdir(...)``: its folder."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp, self._done = tmp_path_factory, {}

    def outdir(self, keras: str, tf_keras_is: str, part: str) -> Path:
        key = (keras, tf_keras_is)
        assert part in HOROVOD_PARTS.get(key, []), f"{part!r} is no part of the {key} job: add it to HOROVOD_PARTS"
        if key not in self._done:
            outdir = self._tmp.mktemp(f"horovod-{keras}-{tf_keras_is}")
            result = horovodrun("hvd_train.py", "several", str(outdir), *HOROVOD_PARTS[key], np=2, timeout=600,
                                env={"TFDIST_TEST_KERAS": keras,
                                     "TF_USE_LEGACY_KERAS": "1" if tf_keras_is == "tf_keras" else "0"})
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            self._done[key] = outdir
        return self._done[key] / part.replace("/", "-")

    def __call__(self, keras: str, tf_keras_is: str, part: str) -> list[dict]:
        outdir = self.outdir(keras, tf_keras_is, part)
        return [json.loads((outdir / f"rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture(scope="session")
def horovod_jobs(tmp_path_factory) -> HorovodJobs:
    return HorovodJobs(tmp_path_factory)
