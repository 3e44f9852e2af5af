"""Which callbacks the Horovod backend adds, wraps or refuses; decided alike on every rank (no job)."""
from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

from tfdist.callbacks import ChiefOnly, TensorBoardRun  # noqa: E402
from tfdist.errors import TfdistError  # noqa: E402
from tfdist.strategies.horovod import _refuse_batch_summaries, _writes_batch_logs  # noqa: E402

KERASES = ["tf_keras", "keras"]  # tf-keras' and Keras 3's callbacks alike


@pytest.mark.parametrize("package", KERASES)
@pytest.mark.parametrize("update_freq", ["batch", 10])
def test_batch_level_tensorboard_is_refused_under_horovod(tmp_path, update_freq, package):
    """Keras writes batch summaries inside the step, from rank 0's own loss, not the job's."""
    keras = pytest.importorskip(package)
    for callback in (keras.callbacks.TensorBoard(str(tmp_path), update_freq=update_freq),
                     TensorBoardRun(str(tmp_path), run_name="r", update_freq=update_freq, is_chief=False)):
        with pytest.raises(TfdistError, match=r"TensorBoard\(update_freq=.*fix: use update_freq='epoch'"):
            _refuse_batch_summaries([callback])
    _refuse_batch_summaries([keras.callbacks.TensorBoard(str(tmp_path))])


@pytest.mark.parametrize("package, model_file", [("tf_keras", "m.h5"), ("keras", "m.keras")])
def test_batch_reading_writers_are_found_on_every_rank_even_when_wrapped(tmp_path, package, model_file):
    keras = pytest.importorskip(package)
    checkpoint = keras.callbacks.ModelCheckpoint(str(tmp_path / model_file), save_freq=5)
    assert _writes_batch_logs(checkpoint)
    assert _writes_batch_logs(ChiefOnly(checkpoint, is_chief=False))  # the same answer off the chief
    assert not _writes_batch_logs(keras.callbacks.ModelCheckpoint(str(tmp_path / model_file)))
    assert not _writes_batch_logs(keras.callbacks.CSVLogger(str(tmp_path / "log.csv")))
