"""Ctrl-C in the middle of a probe, for the tests of `tfdist launch --backend auto` and `tfdist advise --probe`
(tests/cli/): a real `tfdist` process, in click's own standalone mode, whose probe (``probe_hosts``) is replaced
by one that says it started and then blocks, as a probe blocks on its agents (a real probe needs two hosts, and
this machine may have one name); then its process group gets SIGINT, as a terminal sends it. No TensorFlow."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support import subprocess_env

_BLOCKING_PROBE = """\
import os, sys, time
import tfdist.probe.driver as probe
def blocking_probe(*args, **kwargs):
    open(os.path.join({folder!r}, 'probing'), 'w').close()
    time.sleep(600)
probe.probe_hosts = blocking_probe
from tfdist.cli.main import main
sys.argv[0] = 'tfdist'
main()
"""


def interrupt_during_the_probe(tmp_path: Path, args: list[str]) -> tuple[int, str]:
    """Run ``tfdist ARGS`` (a command that probes), press Ctrl-C once its probe has started: its exit code
    and stderr."""
    code = _BLOCKING_PROBE.format(folder=str(tmp_path))
    process = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=subprocess_env(), cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "probing").exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "probing").exists(), process.communicate(timeout=30) if process.poll() is not None \
            else "the probe did not start"
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    return process.returncode, stderr
