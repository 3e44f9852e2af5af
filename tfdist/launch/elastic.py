"""The ``horovodrun`` command of an elastic job, and the host discovery script it polls.

Elastic Horovod learns which hosts it may use by running a *host discovery script* every second
on the launching host; the script prints one ``host:slots`` line per usable host. tfdist writes
one that prints each host of ``--hosts`` whose ssh port accepts a TCP connection right now:

* a TCP connect (bounded by ``PROBE_TIMEOUT`` seconds, all hosts in parallel) rather than
  ``ssh host true``: Horovod runs the script every second, and an ssh login per host per second
  (key exchange, a remote shell) would cost far more than the probe, on the launcher and on every
  host; a host whose link is down or whose machine is gone stops accepting connections at once,
  which is what the script must see. Horovod itself then logs in over ssh to start ranks, so a
  host that accepts TCP but refuses the login fails there, loudly, and is blacklisted.
* the script is plain Python run by the same interpreter (no shell features, no ``nc``), and
  exits 0 even when no host answers (an empty list means "wait for hosts"; a non-zero exit at the
  first poll would end the job).

    argv = elastic_horovodrun_command(["python", "train.py"], "h1:1,h2:1", min_np=1, max_np=2,
                                      np=None, workdir=Path("run"), ssh_port=22)
    subprocess.run(argv)

Horovod's driver waits for every rank it started to report before it re-forms the job, and it
learns that a rank on a host whose link died only when that rank's ``ssh`` session ends. An ssh
client with no keepalives waits for a dead link forever, so the job would hang instead of going on
with the hosts it has. The argv therefore runs ``horovodrun`` with ``WORKDIR/bin`` first on PATH
(``with_ssh_wrapper``), where ``tfdist.launch.ssh_wrapper`` puts an ``ssh`` that adds keepalives
(a session over a dead link ends within about 10 s), checks host keys (Horovod's own ssh command
says ``StrictHostKeyChecking=no``: every host must be in known_hosts) and runs each rank under
tfdist's supervisor, which stops it when the session ends or its heartbeats stop. The non-elastic
``tfdist launch --backend horovod --hosts`` uses the same wrapper.

Horovod's driver waits (up to ``HOROVOD_ELASTIC_TIMEOUT``, 600 s) until the discovery script
lists ``-np`` slots, so ``-np`` defaults to ``--min-np`` here: a start size above what is up would
wait instead of training. It then starts a rank on every slot it finds (up to ``--max-np``), and
hosts found later join. Without ``--network-interface`` it also waits for two hosts at the start
(to find the interface they share); with it, a job may start on one host.

A host the driver saw fail (its rank exited non-zero, or its ssh session died with its link) is
blacklisted; ``--blacklist-cooldown-range`` lets it back after a cool-down, so a host whose link
comes back rejoins the job (``BLACKLIST_COOLDOWN`` seconds by default, doubling on each failure).
"""
from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

from tfdist.atomic_write import default_mode, write_atomically
from tfdist.errors import with_fix
from tfdist.launch.hosts import parse_hosts
from tfdist.launch.commands import LaunchError, launcher_argv

DISCOVERY_SCRIPT = "discover_hosts.py"
PROBE_TIMEOUT = 1.0  # seconds per TCP probe; Horovod polls the script every second
DEFAULT_SSH_PORT = 22
#: (min, max) seconds a failed host stays out before it may rejoin (Horovod doubles it per failure).
BLACKLIST_COOLDOWN = (2, 60)

_SCRIPT = '''#!{python}
"""Host discovery for an elastic Horovod job, written by tfdist (tfdist.launch.elastic).

Prints `host:slots` for each host whose ssh port accepts a TCP connection now."""
import socket
import sys
import threading

HOSTS = {hosts!r}
PORT = {port!r}
TIMEOUT = {timeout!r}
up = {{}}


def probe(host):
    try:
        socket.create_connection((host, PORT), timeout=TIMEOUT).close()
        up[host] = True
    except OSError:
        up[host] = False


threads = [threading.Thread(target=probe, args=(host,), daemon=True) for host, _ in HOSTS]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(TIMEOUT + 1)
sys.stdout.write("".join(f"{{host}}:{{slots}}\\n" for host, slots in HOSTS if up.get(host)))
'''


def write_discovery_script(workdir: Path, hosts: Sequence[tuple[str, int]], ssh_port: int,
                           python: str | None = None, timeout: float = PROBE_TIMEOUT) -> Path:
    """Write the executable discovery script into ``workdir`` and return its path."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / DISCOVERY_SCRIPT
    text = _SCRIPT.format(python=python or sys.executable, hosts=[tuple(h) for h in hosts], port=int(ssh_port),
                          timeout=float(timeout))
    mode = default_mode(str(path)) | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
    write_atomically(path, text, mode=mode)  # horovodrun may already be polling an older one
    return path


def with_ssh_wrapper(argv: Sequence[str], workdir: Path, path: str | None = None) -> list[str]:
    """``argv`` (a horovodrun command) run with ``tfdist.launch.ssh_wrapper``'s ``ssh`` first on its
    PATH: ``env PATH=WORKDIR/bin:PATH ARGV``. ``path`` is the PATH it would otherwise get (default:
    this process's), where the real ``ssh`` must be."""
    from tfdist.launch.ssh_wrapper import install

    path = os.environ.get("PATH", os.defpath) if path is None else path
    if shutil.which("ssh", path=path) is None:
        raise LaunchError(with_fix(f"no `ssh` on PATH ({path}); horovodrun starts every rank over ssh",
                                   "install openssh-client (Debian: apt-get install openssh-client)"))
    bindir = install(Path(workdir))
    return ["env", f"PATH={bindir}{os.pathsep}{path}", *argv]


def elastic_start_size(hosts: str, min_np: int, max_np: int | None, np: int | None) -> int:
    """The ranks an elastic job over ``hosts`` starts with (``np``, default ``min_np``), after checking
    ``min_np`` / ``max_np`` / ``np`` against each other and the slots of ``hosts``. Pure: the
    launcher calls it before anything is written or started."""
    slots = sum(entry.slots for entry in parse_hosts(hosts))
    if isinstance(min_np, bool) or not isinstance(min_np, int) or min_np < 1:
        raise LaunchError(with_fix(f"--min-np is {min_np!r}", "pass --min-np 1 or more"))
    if max_np is not None and (isinstance(max_np, bool) or not isinstance(max_np, int) or max_np < min_np):
        raise LaunchError(with_fix(f"--max-np is {max_np!r}, below --min-np {min_np}",
                                   f"pass --max-np {min_np} or more, or leave it out (no upper bound)"))
    if min_np > slots:
        raise LaunchError(with_fix(f"--min-np {min_np} needs more slots than --hosts {hosts!r} has ({slots})",
                                   f"pass --min-np {slots} or less, or add hosts"))
    start = min_np if np is None else np
    if isinstance(start, bool) or not isinstance(start, int) or not min_np <= start <= (max_np or start):
        raise LaunchError(with_fix(f"-np {np!r} is outside --min-np {min_np} .. --max-np {max_np}",
                                   f"pass -np between them, or leave it out (the job starts with --min-np "
                                   f"{min_np} ranks and grows as hosts are found)"))
    if start > slots:
        raise LaunchError(with_fix(f"-np {start} needs {start} slots but --hosts {hosts!r} has {slots} (Horovod "
                                   "would wait for slots that never come)",
                                   f"pass -np {slots} or less, or leave it out (it defaults to --min-np {min_np})"))
    return start


def elastic_horovodrun_command(command: Sequence[str], hosts: str, min_np: int, max_np: int | None,
                               np: int | None, workdir: Path, ssh_port: int | None = None,
                               ssh_identity_file: str | None = None,
                               horovodrun: str | Sequence[str] | None = None,
                               blacklist_cooldown: tuple[int, int] | None = BLACKLIST_COOLDOWN,
                               path: str | None = None, network_interface: str | None = None) -> list[str]:
    """The ``horovodrun`` argv of an elastic Gloo job over ``hosts`` (``"h1:1,h2:1"``), after
    writing its host discovery script into ``workdir``.

    ``np`` (start size) defaults to ``min_np``: Horovod waits until ``np`` slots are up before it
    trains (see the module docstring); it may not exceed the slots of ``hosts`` or ``max_np``.
    Training goes on while at least ``min_np`` ranks remain. ``blacklist_cooldown`` (see the
    module docstring) is passed as ``--blacklist-cooldown-range``; ``None`` keeps Horovod's default
    (a failed host never comes back). ``path`` is the PATH horovodrun would otherwise get
    (default: this process's); the argv starts with ``env PATH=WORKDIR/bin:PATH`` for the ssh
    wrapper (``with_ssh_wrapper``). ``network_interface`` is horovodrun's ``--network-interface``.
    ``horovodrun``: the launcher's argv (``tfdist.launch.commands.launcher_argv``; default
    ``horovod_launcher()``, which runs Horovod's own code without its TensorFlow-importing build check).
    """
    if not command:
        raise LaunchError(with_fix("no command to launch",
                                   "`tfdist launch --backend horovod --elastic --min-np 1 --hosts h1:1,h2:1 "
                                   "-- python train.py`"))
    parsed = [(entry.host, entry.slots) for entry in parse_hosts(hosts)]
    start = elastic_start_size(hosts, min_np, max_np, np)
    port = DEFAULT_SSH_PORT if ssh_port is None else int(ssh_port)
    argv = with_ssh_wrapper([*launcher_argv(horovodrun), "--gloo", "-np", str(start), "--min-np", str(min_np)],
                            Path(workdir), path)
    script = write_discovery_script(Path(workdir), parsed, port)
    if max_np is not None:
        argv += ["--max-np", str(max_np)]
    argv += ["--host-discovery-script", str(script)]
    if blacklist_cooldown is not None:
        low, high = blacklist_cooldown
        argv += ["--blacklist-cooldown-range", str(int(low)), str(int(high))]
    if ssh_port is not None:
        argv += ["-p", str(port)]
    if ssh_identity_file is not None:
        argv += ["-i", str(ssh_identity_file)]
    if network_interface is not None:
        argv += ["--network-interface", network_interface]
    return [*argv, *command]
