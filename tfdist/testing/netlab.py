"""A network lab: several hosts on one Linux machine, joined by real (shaped, cuttable) links.

Each host is a network namespace with ``eth0`` on a private /24 of 198.18.0.0/15, bridged to the
others; it runs its own OpenSSH server on its address only, accepting the lab's key; its processes
share a cpu cgroup (so one host can be made slow) and a UTS namespace whose hostname is the host
name; ``/etc/hosts`` inside maps every lab host name to its address. Its processes share a memory
cgroup too (:meth:`Lab.limit_memory` caps it; the memory hierarchy is mounted inside, so a task reads
its own cgroup as on a real host). ``ssh``, ``horovodrun`` and
``tfdist launch --hosts`` therefore reach lab hosts as they reach real ones::

    from tfdist.testing.netlab import Lab

    with Lab(["h0", "h1", "h2"]) as lab:                       # needs root
        key, port = str(lab.identity_file), str(lab.ssh_port)
        print(lab.run("h0", ["ssh", "-p", port, "-i", key, "h1", "hostname"]).stdout)   # h1
        lab.shape("h1", rate_mbit=50)                          # both directions of h1's link
        lab.limit_cpu("h2", cores=0.25)                        # everything on h2, sshd sessions too
        lab.limit_memory("h2", 1536 << 20)                     # 1.5 GiB on h2, swap included
        job = lab.popen("h0", ["horovodrun", "-H", "h1:1,h2:1", "-p", port, "-i", key, ...])
        lab.cut("h2"); ...; lab.restore("h2")                  # a link fault mid-run

Everything a lab creates (namespaces, veths, bridge, sshds and every process on its hosts,
cgroups, /etc/netns entries, its directory under /run/tfdist-labs) is removed by :meth:`Lab.close`
(the ``with`` block, or at interpreter exit); every name carries the owner's pid, and each new
``Lab`` first removes the labs whose owner died without closing them (:func:`sweep`).
:func:`leftovers` lists what is left behind; so does ``python -m tfdist.testing.netlab [--sweep]``.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tfdist.errors import with_fix
from tfdist.testing import labspec, labsweep
from tfdist.testing.cgroups import CGROUP_ROOT, CpuCgroups, MemoryCgroups
from tfdist.testing.labspec import LAB_ROOT, SSH_PORT, LabError, LabNames
from tfdist.testing.labsweep import leftovers, sweep

__all__ = ["Lab", "LabError", "leftovers", "sweep"]

_SETUP = "run `make setup` (scripts/setup.sh installs openssh-server and iproute2)"
_TOOLS = {  # tool -> Debian package, for the error message
    "ip": "iproute2", "tc": "iproute2", "sshd": "openssh-server", "ssh": "openssh-client",
    "ssh-keygen": "openssh-client", "unshare": "util-linux", "hostname": "hostname", "sh": "dash",
    "mount": "mount", "mkdir": "coreutils",
}
_SERIAL = itertools.count(1)
_OPEN: dict[str, Lab] = {}
_REGISTRY_LOCK = threading.Lock()


class Lab:
    """N hosts on this machine; see the module docstring. Needs root. Close it (or use ``with``)."""

    def __init__(self, hosts: Iterable[str], *, ssh_port: int = SSH_PORT, start_timeout: float = 30.0,
                 root: Path = LAB_ROOT, cgroup_root: Path = CGROUP_ROOT) -> None:
        self._hosts = labspec.validate_hosts(hosts)
        self._closed = False
        self._popens: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._tools = _require_tools()
        self._root = root
        self._cgroup_root = cgroup_root
        self._ssh_port = ssh_port
        self._names = LabNames(os.getpid(), next(_SERIAL), self._hosts)
        self._cgroups = CpuCgroups.detect(cgroup_root)
        self._memory = MemoryCgroups.detect(cgroup_root)
        with _REGISTRY_LOCK:
            _OPEN[self._names.lab_id] = self
        try:
            sweep(root=root, cgroup_root=cgroup_root)
            self._build(start_timeout)
        except BaseException:
            self.close()
            raise

    # --- what tests read ---------------------------------------------------------------------
    @property
    def hosts(self) -> tuple[str, ...]:
        return self._hosts

    @property
    def ssh_port(self) -> int:
        """The port every host's sshd listens on (its own address only)."""
        return self._ssh_port

    @property
    def identity_file(self) -> Path:
        """The private key root on every host accepts (``ssh -i``, ``horovodrun -i``)."""
        return self.lab_dir / "id_ed25519"

    @property
    def lab_dir(self) -> Path:
        """The lab's own directory (keys, configs, sshd logs); removed by :meth:`close`."""
        return self._names.lab_dir(self._root)

    @property
    def lab_id(self) -> str:
        """The prefix of every name this lab creates (``tfl<pid>n<serial>``)."""
        return self._names.lab_id

    @property
    def bridge_address(self) -> str:
        """The bridge's address in the root namespace: the machine itself reaches every host from it."""
        return str(labspec.bridge_address(self._subnet))

    def address(self, host: str) -> str:
        """``host``'s address on ``eth0`` (the only address its sshd listens on)."""
        return self._addresses[self._check_host(host)]

    def namespace(self, host: str) -> str:
        """The network namespace of ``host`` (for ``ip netns exec``)."""
        return self._names.namespace(self._check_host(host))

    # --- running things on hosts ---------------------------------------------------------------
    def popen(self, host: str, argv: Sequence[str | os.PathLike], **popen_kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` on ``host`` (its cgroup, network namespace and hostname); Popen keywords pass on.

        Returns once the process is in the host's network namespace (or has already exited), so
        :meth:`pids`, :meth:`cut` and the like see it at once. :meth:`close` kills it if still running.
        """
        self._check_open()
        if isinstance(argv, (str, bytes)):
            raise LabError(with_fix(f"`argv` must be a list of arguments, got the string {argv!r}",
                                    f"pass {str(argv).split()!r} (no shell=True)"))
        if popen_kwargs.get("shell"):
            raise LabError(with_fix("Lab.popen runs an argument list, not shell=True",
                                    'pass ["sh", "-c", COMMAND] as argv'))
        name = self.namespace(host)
        procs = [tree.procs(name) for tree in (self._cgroups, self._memory) if tree is not None]
        command = labspec.wrap_argv(host, name, [os.fspath(arg) for arg in argv], procs, self._tools,
                                    memory_mount=None if self._memory is None else self._memory.version)
        process = subprocess.Popen(command, **popen_kwargs)
        with self._lock:
            self._popens.append(process)
        _await_entry(process, name)
        return process

    def run(self, host: str, argv: Sequence[str | os.PathLike], *, timeout: float = 120.0,
            check: bool = False, **popen_kwargs: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` to completion; output captured as text unless told otherwise.

        Takes ``subprocess.run``'s ``input=`` and ``capture_output=`` too. A command still running after
        ``timeout`` seconds is killed and ``subprocess.TimeoutExpired`` propagates, as with
        ``subprocess.run``; with ``check=True`` a non-zero exit is a :class:`LabError` with its stderr.
        """
        popen_kwargs.setdefault("text", True)
        popen_kwargs.pop("capture_output", None)  # captured unless stdout/stderr say otherwise
        if "stdout" not in popen_kwargs and "stderr" not in popen_kwargs:
            popen_kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stdin_text = popen_kwargs.pop("input", None)
        if stdin_text is not None:
            popen_kwargs["stdin"] = subprocess.PIPE
        process = self.popen(host, argv, **popen_kwargs)
        try:
            stdout, stderr = process.communicate(stdin_text, timeout=timeout)
        except BaseException:
            process.kill()
            process.communicate()
            raise
        if check and process.returncode != 0:
            tail = stderr[-2000:].strip() if isinstance(stderr, str) else ""
            command = [os.fspath(arg) for arg in argv]
            problem = f"{command!r} on lab host {host} exited with {process.returncode}: {tail}"
            raise LabError(with_fix(problem, "fix the command, or pass check=False and read the result"))
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def pids(self, host: str) -> list[int]:
        """Every process in ``host``'s network namespace (its sshd included)."""
        return labsweep.netns_pids(self.namespace(host))

    def task_processes(self, host: str, sessions: bool = True) -> list[str]:
        """``"PID: COMMAND LINE"`` of every process on ``host`` but its sshd listener; with
        ``sessions=False`` also without sshd's per-connection processes (on a host whose link is cut,
        a stock sshd keeps those until TCP gives up). Empty: nothing of a job is left there."""
        found = []
        for pid in self.pids(host):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except OSError:
                continue  # exited meanwhile
            if "[listener]" in cmdline or cmdline.startswith("/usr/sbin/sshd"):  # the host's sshd
                continue
            if not sessions and cmdline.startswith(("sshd:", "sshd-session:")):
                continue
            found.append(f"{pid}: {cmdline[:160]}")
        return found

    def sshd_pid(self, host: str) -> int:
        """The pid of ``host``'s sshd: ``set(lab.pids(h)) - {lab.sshd_pid(h)}`` is what else runs there."""
        return self._sshds[self._check_host(host)].pid

    # --- faults and limits -----------------------------------------------------------------------
    def shape(self, host: str, rate_mbit: float | None = 50, latency_ms: float = 0) -> None:
        """Limit ``host``'s link to ``rate_mbit`` in both directions (None, latency 0: no limit).

        Token-bucket (``tbf``) qdiscs on both ends of the host's veth: the root-namespace end shapes
        what the host receives, ``eth0`` inside shapes what it sends. ``latency_ms`` > 0 needs the
        kernel's ``netem`` qdisc (absent on some machines: then :class:`LabError`).
        """
        self._check_open()
        if latency_ms < 0:
            raise LabError(with_fix(f"`latency_ms` must be >= 0, got {latency_ms!r}",
                                    "pass latency_ms=0 or more"))
        tc = self._tools["tc"]
        ends = [[tc, "qdisc", "{verb}", "dev", self._names.veth(self._check_host(host)), "root"],
                [tc, "-n", self.namespace(host), "qdisc", "{verb}", "dev", "eth0", "root"]]
        if rate_mbit is None and latency_ms == 0:
            for end in ends:
                subprocess.run([arg.format(verb="del") for arg in end], capture_output=True, check=False)
            return
        qdisc = labspec.tbf_args(rate_mbit) if latency_ms == 0 else labspec.netem_args(rate_mbit, latency_ms)
        for end in ends:
            result = subprocess.run([arg.format(verb="replace") for arg in end] + qdisc,
                                    capture_output=True, text=True, check=False)
            if result.returncode != 0:
                if latency_ms and "unknown" in result.stderr.lower():
                    raise LabError(with_fix("`latency_ms` needs the netem qdisc, which this kernel lacks "
                                            f"({result.stderr.strip()})",
                                            "load sch_netem (modprobe sch_netem) or pass latency_ms=0"))
                raise LabError(with_fix(f"`tc` could not shape {host}'s link: {result.stderr.strip()}",
                                        "check that the kernel has the tbf qdisc (sch_tbf)"))

    def limit_cpu(self, host: str, cores: float | None) -> None:
        """Give everything on ``host`` at most ``cores`` CPUs (cgroup quota); None lifts the limit."""
        self._check_open()
        if self._cgroups is None:
            raise LabError(with_fix(f"no cgroup cpu controller under {self._cgroup_root}",
                                    "mount the cpu controller (cgroup v1 `cpu`, or v2 listing cpu in "
                                    "cgroup.controllers)"))
        self._cgroups.set_quota(self.namespace(host), cores)

    def limit_memory(self, host: str, limit: int | None) -> None:
        """Cap everything on ``host`` (its sshd and sessions too) at ``limit`` bytes of memory, swap
        included, so beyond it the kernel's OOM killer ends a process there; None lifts the cap.

        cgroup v1 ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is
        accounted), v2 ``memory.max`` and ``memory.swap.max`` 0. Lowering the cap below what the host
        already uses makes the kernel reclaim first (or fail: then :class:`LabError`).
        """
        self._check_open()
        if self._memory is None:
            raise LabError(with_fix(f"no cgroup memory controller under {self._cgroup_root}",
                                    "mount the memory controller (cgroup v1 `memory`, or v2 listing memory "
                                    "in cgroup.controllers)"))
        self._memory.set_limit(self.namespace(host), limit)

    def cut(self, host: str) -> None:
        """Take ``host``'s link down: nothing reaches it and it reaches nothing (processes keep running).

        The root-namespace end of its veth goes down, like a pulled cable: the other hosts see silence
        (TCP retransmits, then their own timeouts), the host's ``eth0`` loses carrier.
        """
        self._check_open()
        _ip("link", "set", self._names.veth(self._check_host(host)), "down")

    def restore(self, host: str) -> None:
        """Bring ``host``'s link back up after :meth:`cut`."""
        self._check_open()
        _ip("link", "set", self._names.veth(self._check_host(host)), "up")

    # --- teardown ------------------------------------------------------------------------------
    def close(self) -> None:
        """Kill every process on every host and remove everything the lab created. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            popens, self._popens = self._popens, []
        if os.getpid() != self._names.owner:  # a forked child must not tear down its parent's lab
            return
        try:
            for process in popens:
                with contextlib.suppress(OSError):
                    process.kill()
            labsweep.destroy(self.lab_id, self._root, self._cgroup_root)
            for process in popens:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)
        finally:
            with _REGISTRY_LOCK:
                _OPEN.pop(self.lab_id, None)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"Lab({list(self._hosts)!r}, id={self.lab_id!r}, {state})"

    # --- building ------------------------------------------------------------------------------
    def _build(self, start_timeout: float) -> None:
        names, lab_dir = self._names, self.lab_dir
        lab_dir.mkdir(parents=True, exist_ok=False)
        (lab_dir / "owner").write_text(f"{names.owner} {labsweep.start_time(names.owner)}\n")
        for key in ("hostkey", "id_ed25519"):
            _check(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"tfdist-lab-{names.lab_id}",
                    "-f", str(lab_dir / key)], "generate the lab's ssh keys")
        shutil.copyfile(lab_dir / "id_ed25519.pub", lab_dir / "authorized_keys")
        with _lab_root_lock(self._root):
            used = labspec.used_networks(_check(["ip", "-o", "addr", "show"], "list addresses"))
            self._subnet = labspec.pick_subnet(used, seed=names.owner * 31 + names.serial)
            _ip("link", "add", names.bridge, "type", "bridge")
            _ip("addr", "add", f"{labspec.bridge_address(self._subnet)}/24", "dev", names.bridge)
        _ip("link", "set", names.bridge, "up")
        self._addresses = labspec.host_addresses(self._subnet, self._hosts)
        hosts_text = labspec.hosts_file(self._addresses)
        for host in self._hosts:
            namespace, veth = names.namespace(host), names.veth(host)
            _ip("netns", "add", namespace)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            _ip("link", "set", veth, "master", names.bridge)
            _ip("link", "set", veth, "up")
            _ip("-n", namespace, "addr", "add", f"{self._addresses[host]}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            etc = labsweep.ETC_NETNS / namespace
            (etc / "ssh").mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_text)
            (etc / "ssh" / "ssh_config").write_text(labspec.ssh_config(lab_dir))
            for tree in (self._cgroups, self._memory):
                if tree is not None:
                    tree.create(namespace)
        host_key = (lab_dir / "hostkey.pub").read_text()
        (lab_dir / "known_hosts").write_text(labspec.known_hosts(self._addresses, self._ssh_port, host_key))
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation directory
        self._sshds = {host: self._start_sshd(host) for host in self._hosts}
        self._await_sshds(self._sshds, start_timeout)

    def _start_sshd(self, host: str) -> subprocess.Popen:
        config = self.lab_dir / f"{host}.sshd_config"
        config.write_text(labspec.sshd_config(self._addresses[host], self._ssh_port, self.lab_dir, host))
        with open(self.lab_dir / f"{host}.sshd.log", "wb") as log:
            return self.popen(host, [self._tools["sshd"], "-D", "-e", "-f", str(config)],
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})

    def _await_sshds(self, sshds: dict[str, subprocess.Popen], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = dict(sshds)
        while waiting:
            for host, process in list(waiting.items()):
                if process.poll() is not None:
                    log = (self.lab_dir / f"{host}.sshd.log").read_text(errors="replace").strip()
                    raise LabError(with_fix(f"sshd of lab host {host} exited with {process.returncode}: "
                                            f"{log[-600:]}", f"check that `sshd -t` passes; {_SETUP}"))
                try:
                    socket.create_connection((self._addresses[host], self._ssh_port), timeout=1).close()
                    del waiting[host]
                except OSError:
                    pass
            if waiting and time.monotonic() > deadline:
                raise LabError(with_fix(f"sshd of lab host(s) {', '.join(waiting)} not listening after "
                                        f"{timeout:g} s", "read the sshd logs in the lab dir; pass a longer "
                                        "start_timeout"))
            if waiting:
                time.sleep(0.1)

    def _check_host(self, host: str) -> str:
        if host not in self._hosts:
            raise LabError(with_fix(f"{host!r} is not a host of this lab (hosts: {', '.join(self._hosts)})",
                                    "use one of the names the Lab was built with"))
        return host

    def _check_open(self) -> None:
        if self._closed:
            raise LabError(with_fix(f"lab {self.lab_id} is closed", "use the lab inside its `with` block"))


def _await_entry(process: subprocess.Popen, namespace: str, timeout: float = 10.0) -> None:
    """Wait until ``process`` runs in ``namespace`` (the wrapper ``exec``s its way in) or has exited."""
    try:
        target = (labsweep.NETNS_DIR / namespace).stat().st_ino
    except OSError:
        return
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        try:
            if os.stat(f"/proc/{process.pid}/ns/net").st_ino == target:
                return
        except OSError:
            return
        time.sleep(0.002)


def _ip(*args: str) -> str:
    return _check(["ip", *args], f"run `ip {' '.join(args)}`")


def _check(argv: list[str], what: str) -> str:
    """``argv``'s output, or LabError saying the lab could not ``what`` and why."""
    result = subprocess.run([labsweep.executable(argv[0]), *argv[1:]], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        reason = result.stderr.strip() or f"exit {result.returncode}"
        raise LabError(with_fix(f"the network lab could not {what}: {reason}",
                                "run as root on Linux with network namespaces; `ip netns list` and "
                                "tfdist.testing.netlab.leftovers() show what is already there"))
    return result.stdout


def _require_tools() -> dict[str, str]:
    """Absolute paths of the tools a lab needs; LabError naming the missing one and the fix."""
    if os.geteuid() != 0:
        raise LabError(with_fix("the network lab needs root (namespaces, bridges, sshd), running as uid "
                                f"{os.geteuid()}", "run the tests as root (CI does) or under sudo"))
    return labsweep.require_tools(_TOOLS, _SETUP)


@contextlib.contextmanager
def _lab_root_lock(root: Path):
    """Serialises subnet choice between processes (held until the bridge has its address)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@atexit.register
def _close_all() -> None:
    with _REGISTRY_LOCK:
        labs = list(_OPEN.values())
    for lab in labs:
        with contextlib.suppress(Exception):
            lab.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tfdist.testing.netlab [--sweep]``: list the labs left behind (and remove them)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tfdist.testing.netlab", description=main.__doc__)
    parser.add_argument("--sweep", action="store_true", help="remove every lab whose owner process is dead")
    args = parser.parse_args(argv)
    if args.sweep:
        for lab_id in sweep():
            print(f"removed {lab_id}")
    left = leftovers()
    print("\n".join(left) if left else "no lab left behind")
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
