"""``strategy.export_to`` (issue 34): an export destination declared before ``fit`` is checked before
its first step, so an existing export without ``overwrite=True`` fails at once with one error naming
``overwrite=True``, instead of after training; ``export(model)`` then writes there. The declaration's
logic without TensorFlow, then a real ``fit``."""
from __future__ import annotations

import os

import pytest

from tfdist.export import destination
from tfdist.export.errors import ExportArgumentError
from tfdist.export.paths import ExportPathError


def _export(directory, marker: str = "old") -> None:
    os.makedirs(directory)
    (directory / "saved_model.pb").write_text(marker)


def _listing(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_declared_existing_export_is_refused_naming_overwrite_and_nothing_is_written(tmp_path):
    _export(tmp_path / "model")
    before = _listing(tmp_path)
    declared = destination.declare(str(tmp_path / "model"))
    with pytest.raises(ExportPathError) as info:
        destination.check(declared)
    assert str(info.value) == (
        f"strategy.export_to: `path` {str(tmp_path / 'model')!r} already exists (checked before training: nothing "
        "was trained or written); fix: pass overwrite=True to strategy.export_to to replace the export there, or "
        "another path")
    assert _listing(tmp_path) == before
    destination.check(destination.declare(tmp_path / "model", overwrite=True))  # the fix it names
    (tmp_path / "notes").mkdir()
    with pytest.raises(ExportPathError, match=r"^strategy.export_to: `path` .* exists and is not a SavedModel "
                                              r"directory .*; fix: remove it yourself or pick another path$"):
        destination.check(destination.declare(tmp_path / "notes", overwrite=True))
    destination.check(None)  # nothing declared: nothing to check


def test_declaring_checks_the_arguments_and_reads_nothing(tmp_path):
    declared = destination.declare(tmp_path / "a" / "b.keras", format="keras")
    assert declared == destination.Destination(str(tmp_path / "a" / "b.keras"), "keras", False)
    assert not (tmp_path / "a").exists()
    with pytest.raises(ExportArgumentError, match=r"strategy.export_to: `overwrite` must be True or False, got "
                                                  r"'yes'; fix: pass overwrite=True or overwrite=False"):
        destination.declare(tmp_path / "m", overwrite="yes")
    with pytest.raises(ExportPathError, match=r"`format` must be one of \['saved_model', 'keras'\], got 'onnx'"):
        destination.declare(tmp_path / "m", format="onnx")
    with pytest.raises(ExportPathError, match=r"must end in .keras with format='keras'"):
        destination.declare(tmp_path / "m", format="keras")


def test_export_takes_what_it_leaves_out_from_the_declaration_and_refuses_contradictions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert destination.resolve(None, "m", None, None) == ("m", "saved_model", False)
    assert destination.resolve(None, "m.keras", "keras", True) == ("m.keras", "keras", True)
    with pytest.raises(ExportArgumentError, match=r"strategy.export needs a `path`, and none was declared with "
                                                  r"strategy.export_to; fix: "):
        destination.resolve(None, None, None, None)
    declared = destination.declare("exports/1", overwrite=True)
    whole = (str(tmp_path / "exports" / "1"), "saved_model", True)
    assert destination.resolve(declared, None, None, None) == whole
    assert destination.resolve(declared, "exports/1", "saved_model", True) == whole  # the same, spelt out
    assert destination.resolve(declared, tmp_path / "exports" / "1", None, None) == whole
    for given, message in [
        ({"path": "exports/2"}, f"given path={str(tmp_path / 'exports' / '2')!r}, and strategy.export_to declared "
                                f"path={whole[0]!r}, which fit checked before training; fix: leave `path` out"),
        ({"overwrite": False}, "given overwrite=False, and strategy.export_to declared overwrite=True"),
        ({"overwrite": 1}, "given overwrite=1, and strategy.export_to declared overwrite=True"),
        ({"format": "keras"}, "given format='keras', and strategy.export_to declared format='saved_model'"),
    ]:
        arguments = {"path": None, "format": None, "overwrite": None, **given}
        with pytest.raises(ExportArgumentError) as info:
            destination.resolve(declared, **arguments)
        assert message in str(info.value) and "; fix: " in str(info.value)


def test_fit_refuses_a_declared_existing_export_before_its_first_step_and_export_writes_there(tmp_path):
    """Before the fix the existing export was found only by ``export``, after training (and there was
    no way to declare it: ``export_to`` did not exist)."""
    import numpy as np
    import tf_keras

    import tfdist

    strategy = tfdist.make_strategy("single")
    with strategy.scope():
        model = tf_keras.Sequential([tf_keras.Input((3,), name="x"), tf_keras.layers.Dense(1)])
        model.compile(optimizer=strategy.optimizer(tf_keras.optimizers.SGD(0.1)), loss="mse")
    x, y = np.ones((8, 3), "float32"), np.zeros((8, 1), "float32")
    steps: list[int] = []
    counter = tf_keras.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: steps.append(batch))
    target = tmp_path / "exports" / "1"
    _export(target)
    weights = [w.copy() for w in model.get_weights()]
    logs = tmp_path / "logs"

    assert strategy.export_to(target) == str(target)
    with pytest.raises(ExportPathError, match=r"^strategy.export_to: `path` .* already exists \(checked before "
                                              r"training: nothing was trained or written\); fix: pass "
                                              r"overwrite=True to strategy.export_to"):
        strategy.fit(model, x, y, batch_size=4, epochs=1, verbose=0,
                     callbacks=[counter, tf_keras.callbacks.CSVLogger(str(logs / "log.csv"))])
    assert steps == [] and all((a == b).all() for a, b in zip(weights, model.get_weights()))
    assert _listing(tmp_path) == ["exports", "exports/1", "exports/1/saved_model.pb"]  # no log dir created either

    strategy.export_to(target, overwrite=True)
    strategy.fit(model, x, y, batch_size=4, epochs=1, verbose=0, callbacks=[counter])
    assert steps == [0, 1]
    assert strategy.export(model, verify=False) == str(target)
    assert (target / "saved_model.pb").read_bytes() != b"old"
    with pytest.raises(ExportArgumentError, match=r"given path=.*, and strategy.export_to declared path="):
        strategy.export(model, tmp_path / "elsewhere", verify=False)
    assert sorted(p.name for p in (tmp_path / "exports").iterdir()) == ["1"]
