"""The one backend table (tfdist/launch/backends.py) against the strategy registry, the launcher and the advisor."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tfdist.launch.backends import LAUNCHABLE, MODELLED, TABLE


def test_the_table_is_pinned():
    assert LAUNCHABLE == ("parameter_server", "multi_worker_mirrored", "horovod")
    assert set(MODELLED) == set(LAUNCHABLE)
    assert {b.name: b.launcher for b in TABLE} == {"parameter_server": "tf_cluster",
                                                  "multi_worker_mirrored": "tf_cluster", "horovod": "horovodrun"}


def test_every_backend_auto_may_plan_is_one_an_adaptive_run_switches_between():
    """``launch --backend auto`` follows every plan mid-run (tfdist/cli/launch.py asks no more)."""
    from tfdist.run_channel import ADAPTIVE_BACKENDS

    assert set(MODELLED) <= set(ADAPTIVE_BACKENDS) and set(ADAPTIVE_BACKENDS) <= set(LAUNCHABLE)


def test_every_launchable_and_modelled_name_is_a_registered_strategy():
    pytest.importorskip("tensorflow")
    from tfdist.strategies import STRATEGIES, load_backends

    load_backends()
    assert set(LAUNCHABLE) <= set(STRATEGIES.names())
    assert set(MODELLED) <= set(STRATEGIES.names())


def test_launch_and_advise_read_the_table():
    from tfdist.advise import BACKENDS
    from tfdist.advise.cost import STRATEGY_NAMES
    from tfdist.advise.recommend import backend_of
    from tfdist.cli.launch import AUTO, launch

    (backend,) = [p for p in launch.params if p.name == "backend"]
    assert tuple(backend.type.choices) == (*LAUNCHABLE, AUTO)
    assert BACKENDS == MODELLED
    assert {backend_of(name) for name in STRATEGY_NAMES} == set(MODELLED)  # every modelled variant's backend


def test_the_table_imports_no_tensorflow():
    code = ("import sys; import tfdist.launch.backends, tfdist.cli.launch, tfdist.advise; "
            "assert 'tensorflow' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
