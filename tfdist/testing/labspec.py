"""The pure half of the network lab: names, addresses and the text of every file it writes.

Nothing here touches the machine, so all of it is unit-tested without root. Every resource a lab
creates carries the lab's id, ``tfl<owner pid>n<serial>``: the owner's pid lets a later lab (or
:func:`tfdist.testing.netlab.leftovers`) recognise resources whose owner is gone, and the serial
keeps two labs of one process apart.

    >>> names = LabNames(owner=4242, serial=1, hosts=("h0", "h1"))
    >>> names.lab_id, names.bridge, names.namespace("h1"), names.veth("h1")
    ('tfl4242n1', 'tfl4242n1b', 'tfl4242n1-h1', 'tfl4242n1v1')
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tfdist.errors import TfdistError, with_fix

#: Every lab resource name starts with this (namespaces, bridge, veths, cgroups, /etc/netns, lab dirs).
PREFIX = "tfl"
#: The private range of every lab (RFC 2544 benchmarking addresses; nothing leaves the machine).
LAB_RANGE = ipaddress.ip_network("198.18.0.0/15")
#: Where labs keep their keys, configs, logs and pid files (one directory per lab).
LAB_ROOT = Path("/run/tfdist-labs")
#: The port every lab host's sshd listens on (not 22, so tests pass --ssh-port like a user must).
SSH_PORT = 2022
#: Host addresses are ``.11``, ``.12``, ... of the lab's /24 (``.1`` is the bridge in the root namespace).
FIRST_HOST_OCTET = 11
#: Linux interface names are at most 15 characters.
IFNAMSIZ = 15

_HOST_NAME = re.compile(r"[a-z][a-z0-9]{0,15}")
_OWNED = re.compile(rf"^{PREFIX}(\d+)n(\d+)(?=$|[-bv])")


class LabError(TfdistError, RuntimeError):
    """The network lab could not be built or driven: names what failed and how to fix it."""


def validate_hosts(hosts: Iterable[str]) -> tuple[str, ...]:
    """The host names as a tuple, or :class:`LabError` naming the bad one."""
    if isinstance(hosts, str):
        raise LabError(with_fix(f"`hosts` must be a list of host names, got the string {hosts!r}",
                                f"pass Lab([{hosts!r}])"))
    names = tuple(hosts)
    if not names:
        raise LabError(with_fix("`hosts` is empty", 'pass at least one host name, e.g. Lab(["h0", "h1"])'))
    for name in names:
        if not isinstance(name, str) or not _HOST_NAME.fullmatch(name):
            raise LabError(with_fix(f"lab host name {name!r} is not a short name [a-z][a-z0-9]* (at most 16)",
                                    'use names like "h0", "ps", "worker1"'))
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise LabError(with_fix(f"lab host name(s) {', '.join(duplicates)} listed twice",
                                "name each host once"))
    if len(names) > 200:
        raise LabError(with_fix(f"{len(names)} lab hosts do not fit one /24", "use at most 200 hosts"))
    return names


@dataclass(frozen=True)
class LabNames:
    """Every name of one lab, derived from its owner's pid, a per-process serial and the host names."""

    owner: int
    serial: int
    hosts: tuple[str, ...]

    def __post_init__(self) -> None:
        longest = self.veth(self.hosts[-1]) if self.hosts else self.bridge
        if len(longest) > IFNAMSIZ or len(self.bridge) > IFNAMSIZ:
            raise LabError(with_fix(f"lab interface name {longest!r} is longer than Linux's {IFNAMSIZ} "
                                    "characters", "use fewer hosts per lab or fewer labs per process"))

    @property
    def lab_id(self) -> str:
        return f"{PREFIX}{self.owner}n{self.serial}"

    @property
    def bridge(self) -> str:
        return f"{self.lab_id}b"

    def namespace(self, host: str) -> str:
        """Network namespace, cgroup and /etc/netns entry of ``host``."""
        return f"{self.lab_id}-{host}"

    def veth(self, host: str) -> str:
        """Root-namespace end of ``host``'s veth pair (the other end is ``eth0`` inside the host)."""
        return f"{self.lab_id}v{self.hosts.index(host)}"

    def lab_dir(self, root: Path = LAB_ROOT) -> Path:
        return root / self.lab_id


def owner_of(name: str) -> int | None:
    """The owner pid a lab resource name carries, or None when ``name`` is not a lab resource."""
    match = _OWNED.match(name)
    return int(match.group(1)) if match else None


def lab_id_of(name: str) -> str | None:
    """The lab id a resource name starts with (``tfl4242n1`` for ``tfl4242n1-h0``), or None."""
    match = _OWNED.match(name)
    return f"{PREFIX}{match.group(1)}n{match.group(2)}" if match else None


def pick_subnet(used: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network],
                seed: int) -> ipaddress.IPv4Network:
    """A /24 of 198.18.0.0/15 that overlaps none of ``used``, searched from a ``seed``-derived start.

    198.18.0.0/24 is left out (hand-wired tests used it); starting at a pid-derived /24 makes two labs
    that start at the same moment unlikely to even try the same one (a file lock makes it certain).
    """
    candidates = list(LAB_RANGE.subnets(new_prefix=24))[1:]
    taken = [net for net in used if net.version == 4]
    start = seed % len(candidates)
    for offset in range(len(candidates)):
        subnet = candidates[(start + offset) % len(candidates)]
        if not any(subnet.overlaps(net) for net in taken):
            return subnet
    raise LabError(with_fix("every /24 of 198.18.0.0/15 is already used by an interface of this machine",
                            "remove stale labs (tfdist.testing.netlab.sweep()), or free part of the range"))


def bridge_address(subnet: ipaddress.IPv4Network) -> ipaddress.IPv4Address:
    return subnet.network_address + 1


def host_addresses(subnet: ipaddress.IPv4Network, hosts: tuple[str, ...]) -> dict[str, str]:
    """``{host: address}``: ``.11`` for the first host, ``.12`` for the second, ..."""
    return {host: str(subnet.network_address + FIRST_HOST_OCTET + index) for index, host in enumerate(hosts)}


def used_networks(ip_addr_output: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The networks in the output of ``ip -o addr show`` (``... inet 198.18.7.1/24 ...``)."""
    networks = []
    for match in re.finditer(r"\binet6?\s+([0-9a-fA-F.:]+/\d+)", ip_addr_output):
        networks.append(ipaddress.ip_interface(match.group(1)).network)
    return networks


def hosts_file(addresses: Mapping[str, str]) -> str:
    """``/etc/hosts`` inside every lab host: localhost, and every lab host name at its address."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{address}\t{host}" for host, address in addresses.items()]
    return "\n".join(lines) + "\n"


def sshd_config(address: str, port: int, lab_dir: Path, host: str) -> str:
    """The sshd configuration of one host: its own address only, the lab's key, no passwords.

    No ClientAliveInterval: like stock OpenSSH, sshd never notices a cut link by itself, so a
    session (and what runs in it) outlives a vanished launcher unless tfdist stops it (the
    supervisor's heartbeats, ``tfdist.launch.processes``)."""
    return "\n".join([
        f"ListenAddress {address}",
        f"Port {port}",
        f"HostKey {lab_dir / 'hostkey'}",
        f"AuthorizedKeysFile {lab_dir / 'authorized_keys'}",
        f"PidFile {lab_dir / f'{host}.sshd.pid'}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "StrictModes no",
        "UsePAM no",
        "UseDNS no",
        "PrintMotd no",
        "MaxStartups 100:30:200",
        "MaxSessions 100",
        "Subsystem sftp internal-sftp",
    ]) + "\n"


def ssh_config(lab_dir: Path) -> str:
    """``/etc/ssh/ssh_config`` inside every lab host: trust the lab's host key, never prompt.

    No Port and no IdentityFile: a test passes ``-p``/``-i`` (``--ssh-port``/``--ssh-identity-file``)
    as a user on a real cluster must.
    """
    known = lab_dir / "known_hosts"
    return "\n".join([
        "Host *",
        f"    UserKnownHostsFile {known}",
        f"    GlobalKnownHostsFile {known}",
        "    StrictHostKeyChecking yes",
        "    BatchMode yes",
        "    LogLevel ERROR",
    ]) + "\n"


def known_hosts(addresses: Mapping[str, str], port: int, host_public_key: str) -> str:
    """One line per host naming it by name and address (``[name]:port`` form for a port other than 22)."""
    key = " ".join(host_public_key.split()[:2])
    lines = []
    for host, address in addresses.items():
        names = [host, address] if port == 22 else [f"[{host}]:{port}", f"[{address}]:{port}"]
        lines.append(f"{','.join(names)} {key}")
    return "\n".join(lines) + "\n"


def wrap_argv(host: str, namespace: str, argv: list[str], cgroup_procs: Path | Sequence[Path] | None,
              tools: Mapping[str, str] | None = None, memory_mount: int | None = None) -> list[str]:
    """The command line that runs ``argv`` on a lab host.

    Joins the host's cgroups first (``cgroup_procs``: one ``cgroup.procs`` file or several, e.g. cpu
    and memory; ``ip netns exec`` remounts ``/sys``, so afterwards the cgroup tree is not the
    machine's), then enters the network namespace (which bind-mounts /etc/netns/NS/* over /etc), then
    a UTS namespace whose hostname is the host name. With ``memory_mount`` (the memory controller's
    cgroup version, 1 or 2) the memory hierarchy is mounted again at ``/sys/fs/cgroup`` inside
    (private to the host's mount namespace), so a task there reads its own memory cgroup as on a real
    host (``tfdist.launch.oom``); a mount that fails leaves that out and nothing else. Every step
    ``exec``s the next, so the returned process is ``argv`` itself. ``tools`` maps ``sh``, ``ip``,
    ``unshare``, ``hostname``, ``mount`` and ``mkdir`` to absolute paths, so the caller's ``env`` (its
    PATH) only matters for ``argv``.
    """
    tool = {"sh": "sh", "ip": "ip", "unshare": "unshare", "hostname": "hostname", "mount": "mount",
            "mkdir": "mkdir", **(tools or {})}
    script = '"$1" "$2" && shift 2 && exec "$@"'
    if memory_mount is not None:
        script = f"{{ {memory_mount_script(memory_mount, tool)}; }} 2>/dev/null; {script}"
    inner = [tool["ip"], "netns", "exec", namespace, tool["unshare"], "--uts", "--",
             tool["sh"], "-c", script, "tfdist-lab", tool["hostname"], host, *argv]
    if cgroup_procs is None:
        return inner
    procs = [cgroup_procs] if isinstance(cgroup_procs, (str, Path)) else list(dict.fromkeys(cgroup_procs))
    if not procs:
        return inner
    if len(procs) == 1:
        return [tool["sh"], "-c", 'echo $$ > "$1" && shift && exec "$@"', "tfdist-lab", str(procs[0]), *inner]
    join = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@"'
    return [tool["sh"], "-c", join, "tfdist-lab", *map(str, procs), "--", *inner]


def memory_mount_script(version: int, tools: Mapping[str, str] | None = None) -> str:
    """Shell commands that mount the memory cgroup hierarchy (v1 or v2) at ``/sys/fs/cgroup``."""
    tool = {"mount": "mount", "mkdir": "mkdir", **(tools or {})}
    if version == 1:
        return (f"{tool['mount']} -t tmpfs tfdist-lab /sys/fs/cgroup && {tool['mkdir']} /sys/fs/cgroup/memory "
                f"&& {tool['mount']} -t cgroup -o memory cgroup /sys/fs/cgroup/memory")
    return f"{tool['mount']} -t cgroup2 cgroup2 /sys/fs/cgroup"


def tbf_args(rate_mbit: float) -> list[str]:
    """``tc`` arguments of a token bucket at ``rate_mbit``: a burst of ~10 ms (at least 32 KiB)."""
    if not rate_mbit > 0:
        raise LabError(with_fix(f"`rate_mbit` must be > 0, got {rate_mbit!r}",
                                "pass e.g. rate_mbit=50, or None"))
    burst = max(32 * 1024, int(rate_mbit * 1e6 / 8 / 100))
    return ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "50ms"]


def netem_args(rate_mbit: float | None, latency_ms: float) -> list[str]:
    """``tc`` arguments of a netem delay (and rate), for kernels that have netem."""
    args = ["netem", "delay", f"{latency_ms}ms", "limit", "10000"]
    if rate_mbit is not None:
        tbf_args(rate_mbit)  # same validation
        args += ["rate", f"{rate_mbit}mbit"]
    return args
