"""Helpers shared by tests (importable as ``support`` through pytest's ``pythonpath``)."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
#: Set by `make test-fast`: the property-based fuzzers run a fifth of their examples (`make test`: all).
FAST_FUZZ = os.environ.get("TFDIST_FAST_FUZZ") == "1"


def examples(count: int) -> int:
    """Hypothesis' ``max_examples`` for a fuzzer: ``count``, or a fifth of it under `make test-fast`."""
    return max(20, count // 5) if FAST_FUZZ else count
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python: quiet TensorFlow, tfdist importable, no cluster vars."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "OMPI_", "PMI_", "SLURM_")) and k != "TF_CONFIG"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(SCRIPTS)
    env.update(extra)
    return env


#: ms between Horovod's background cycles in the suite's own Horovod jobs (see ``horovodrun``)
HOROVOD_TEST_CYCLE_MS = "5"


def horovodrun(script: str, *args: str, np: int = 2, timeout: float = 240,
               env: dict[str, str] | None = None, binary: bool = False) -> subprocess.CompletedProcess:
    """Run ``tests/scripts/<script>`` as a real ``horovodrun -np N -H localhost:N --gloo`` job.

    It runs what ``tfdist launch --backend horovod`` runs: ``python -m tfdist.launch.horovod_launcher``
    (``tfdist.launch.commands.horovod_launcher``), Horovod's own launcher with horovodrun's argv, its build
    check answered from tfdist's cache instead of a child importing TensorFlow (~4 CPU-s per job, ~20
    jobs in the suite). ``binary=True`` runs the ``horovodrun`` script itself, for the jobs that run a
    ``horovodrun`` command README.md or docs/ show: users type that one, as they would, in Horovod's
    defaults.

    The suite's own jobs (``binary=False``) run Horovod's background loop every ``HOROVOD_CYCLE_TIME``
    = 5 ms instead of its 1 ms default (``env`` may say otherwise): at 1 ms each rank polls its peer a
    thousand times a second even when idle (0.13-0.19 core per idle rank), 18 % of a 2-rank job's CPU
    (hvd_train.py kerases: 44.6 against 36.7 CPU-s, 3 runs each, interleaved). The cycle only batches
    tensors into fewer allreduces; what these jobs check (weights, metrics, files) does not depend on
    it, and the lab's Horovod jobs, whose speed is compared with `tfdist advise`, keep the default."""
    from tfdist.launch.commands import find_horovodrun, horovod_launcher

    if binary:
        found = find_horovodrun()
        launcher = None if found is None else [found]
    else:
        launcher = horovod_launcher()
    if launcher is None:
        raise RuntimeError("horovodrun is not installed; run `make setup`")
    command = [*launcher, "-np", str(np), "-H", f"localhost:{np}", "--gloo",
               sys.executable, str(SCRIPTS / script), *args]
    cycle = {} if binary else {"HOROVOD_CYCLE_TIME": HOROVOD_TEST_CYCLE_MS}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=subprocess_env(**{**cycle, **(env or {})}), cwd=REPO)



def nested_signal(handler: str, where: str, deadlock_after: float) -> str:
    """Run ``tests/scripts/nested_signal.py HANDLER WHERE`` (a signal landing inside the stop handler's
    ``Event.set``, or inside the main thread's wait on the stop): ``"set"`` when the handler came through
    (the stop set, exit 0), ``"deadlocked"`` when the process still runs ``deadlock_after`` seconds after
    it armed (it is then killed), else its output. Armed, a handler that comes through needs
    milliseconds: a bound for a test that expects that may be generous at no cost, one for a test that
    expects the deadlock is waited out whole. A process that has not armed within 120 s is killed."""
    import select

    process = subprocess.Popen([sys.executable, str(SCRIPTS / "nested_signal.py"), handler, where],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=subprocess_env())
    try:
        armed = process.stdout.readline() if select.select([process.stdout], [], [], 120)[0] else ""
        if armed != "armed\n":
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
            process.kill()
            return armed + process.stdout.read()
        try:
            process.wait(timeout=deadlock_after)
        except subprocess.TimeoutExpired:
            return "deadlocked"
        rest = process.stdout.read()
        return "set" if process.returncode == 0 and rest == "set\n" else armed + rest
    finally:
        process.kill()
        process.wait()
        process.stdout.close()


def readme_launch_options(containing: str) -> tuple[str, ...]:
    """The options of the one ``tfdist launch`` line in the "Several hosts" block (the first console
    block of docs/several-hosts.md, once the README's) that contains ``containing``: what comes
    between ``tfdist launch`` and ``--``. The lab tests run these options (adding the lab's ssh port
    and key, and their own script), so the docs show commands that were run."""
    import re
    import shlex

    page = (REPO / "docs" / "several-hosts.md").read_text()
    block = re.search(r"^```console\n(.*?)^```", page, flags=re.S | re.M).group(1)
    found = [line for line in block.splitlines() if line.startswith("tfdist launch ") and containing in line]
    if len(found) != 1:
        raise AssertionError(f"the Several hosts block of docs/several-hosts.md has {len(found)} "
                             f"launch lines with {containing!r}")
    words = shlex.split(found[0])
    return tuple(words[2:words.index("--")])


def assert_nothing_left(lab, timeout: float = 60, cut: tuple[str, ...] = (),
                        hosts: tuple[str, ...] | None = None) -> float:
    """Within ``timeout`` s only sshd is left on every lab host (or on ``hosts``); on the ``cut``
    hosts (still cut) sshd's own sessions may linger, as on a stock host, but nothing else. The
    seconds it took; fails naming what is left. Call it before the lab closes (closing kills all)."""
    import time

    start = time.monotonic()
    while True:
        left = {host: lab.task_processes(host, sessions=host not in cut) for host in hosts or lab.hosts}
        if not any(left.values()) or time.monotonic() - start > timeout:
            break
        time.sleep(0.5)
    assert not any(left.values()), f"processes left on the hosts {timeout:.0f} s after the job: {left}"
    return time.monotonic() - start


def process_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie counts: this machine's init may not reap orphans)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[1].split()[0] == "Z"


def invoke(*argv: str):
    """``tfdist ARGV`` in this process (click's CliRunner), named ``tfdist`` as from the shell."""
    from click.testing import CliRunner

    from tfdist.cli.main import cli

    return CliRunner().invoke(cli, list(argv), prog_name="tfdist")


def usage_error(result) -> str:
    """The ``Error: ...`` text of a command refused as a usage error: exit code 2, no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return result.output[result.output.index("Error: "):]


def load_script(path: Path, name: str) -> ModuleType:
    """The script at ``path`` (a benchmark, say) imported as module ``name``, registered in
    ``sys.modules`` first (its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
