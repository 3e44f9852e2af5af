"""The elastic horovodrun command and its host discovery script (tfdist.launch.elastic), without Horovod."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tfdist.errors import TfdistError
from tfdist.launch.elastic import (
    BLACKLIST_COOLDOWN,
    DISCOVERY_SCRIPT,
    elastic_horovodrun_command,
    with_ssh_wrapper,
    write_discovery_script,
)
from tfdist.launch.commands import LaunchError

COMMAND = ["python", "train.py", "--epochs", "3"]


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_argv_names_every_elastic_option_and_ends_with_the_command(tmp_path):
    argv = elastic_horovodrun_command(COMMAND, "h1:1,h2:2", min_np=1, max_np=3, np=2, workdir=tmp_path,
                                      ssh_port=2222, ssh_identity_file="/keys/lab", horovodrun="/venv/bin/horovodrun")
    assert argv[:2] == ["env", f"PATH={tmp_path / 'bin'}:{os.environ['PATH']}"]
    assert argv[2] == "/venv/bin/horovodrun"
    assert "--gloo" in argv
    assert (_flag(argv, "-np"), _flag(argv, "--min-np"), _flag(argv, "--max-np")) == ("2", "1", "3")
    assert _flag(argv, "--host-discovery-script") == str(tmp_path / DISCOVERY_SCRIPT)
    assert (_flag(argv, "-p"), _flag(argv, "-i")) == ("2222", "/keys/lab")
    cooldown = argv.index("--blacklist-cooldown-range")
    assert argv[cooldown + 1:cooldown + 3] == [str(n) for n in BLACKLIST_COOLDOWN]
    assert argv[-len(COMMAND):] == COMMAND
    assert "-H" not in argv  # the discovery script, not a fixed host list, says where ranks run
    assert "--network-interface" not in argv
    argv = elastic_horovodrun_command(COMMAND, "h1:1,h2:2", min_np=1, max_np=3, np=None, workdir=tmp_path,
                                      horovodrun="horovodrun", network_interface="eth0")
    assert _flag(argv, "--network-interface") == "eth0" and argv[-len(COMMAND):] == COMMAND


def test_the_job_starts_with_min_np_ranks_by_default_and_leaves_ssh_options_out(tmp_path):
    """Horovod waits until -np slots are up: a default of every slot would wait (600 s, then fail)
    whenever a host is down at the start, which elastic mode exists to survive."""
    argv = elastic_horovodrun_command(COMMAND, "h1:1,h2:1,h3:2", min_np=2, max_np=None, np=None, workdir=tmp_path,
                                      horovodrun="horovodrun")
    assert _flag(argv, "-np") == "2" and "--max-np" not in argv
    assert "-p" not in argv and "-i" not in argv
    argv = elastic_horovodrun_command(COMMAND, "h1:1,h2:1,h3:2", min_np=1, max_np=2, np=None, workdir=tmp_path,
                                      horovodrun="horovodrun", blacklist_cooldown=None)
    assert _flag(argv, "-np") == "1" and "--blacklist-cooldown-range" not in argv
    argv = elastic_horovodrun_command(COMMAND, "h1:1,h2:1,h3:2", min_np=1, max_np=None, np=4, workdir=tmp_path,
                                      horovodrun="horovodrun")
    assert _flag(argv, "-np") == "4"  # every slot, when asked


def test_horovodrun_is_found_like_the_static_launcher_finds_it(tmp_path):
    from tfdist.launch.commands import horovod_launcher

    argv = elastic_horovodrun_command(COMMAND, "h1,h2", min_np=1, max_np=2, np=None, workdir=tmp_path)
    launcher = horovod_launcher() or ["horovodrun"]
    assert argv[2:2 + len(launcher)] == launcher and argv[2 + len(launcher)] == "--gloo"
    entry = ["/venv/bin/python", "-m", "tfdist.launch.horovod_launcher"]
    argv = elastic_horovodrun_command(COMMAND, "h1,h2", min_np=1, max_np=2, np=None, workdir=tmp_path,
                                      horovodrun=entry)
    assert argv[2:6] == [*entry, "--gloo"] and argv[-len(COMMAND):] == COMMAND


def test_horovodrun_finds_the_tfdist_ssh_wrapper_first_on_its_path(tmp_path):
    """Without keepalives horovodrun's ssh to a host whose link died waits forever, and so does the
    job; Horovod's own ssh options skip the host key check. The wrapper (tfdist.launch.ssh_wrapper,
    tested in tests/launch/test_ssh_wrapper.py) fixes both: here, that horovodrun finds it first."""
    from tfdist.launch.ssh_wrapper import WRAPPER_OPTIONS, real_ssh

    fake_bin = tmp_path / "usr-bin"
    fake_bin.mkdir()
    fake_ssh = fake_bin / "ssh"
    fake_ssh.write_text('#!/bin/sh\necho "$@"\n')
    fake_ssh.chmod(0o755)
    argv = elastic_horovodrun_command(COMMAND, "h1:1,h2:1", min_np=1, max_np=2, np=None, workdir=tmp_path / "w",
                                      horovodrun="horovodrun", path=str(fake_bin))
    assert argv[0] == "env"
    path = argv[1].removeprefix("PATH=")
    assert path.split(os.pathsep) == [str(tmp_path / "w" / "bin"), str(fake_bin)]
    found = shutil.which("ssh", path=path)
    assert found == str(tmp_path / "w" / "bin" / "ssh")
    assert real_ssh(path) == str(fake_ssh), "the wrapper must find the real ssh behind itself"
    assert {"StrictHostKeyChecking=yes", "BatchMode=yes", "ServerAliveInterval=3"} <= set(WRAPPER_OPTIONS)
    result = subprocess.run([found, "-o", "StrictHostKeyChecking=no", "h2", "-p", "2222", "true"],
                            capture_output=True, text=True, timeout=60, check=False,
                            env={**os.environ, "PATH": path})
    words = result.stdout.split()
    assert words[:len(WRAPPER_OPTIONS)] == list(WRAPPER_OPTIONS), result.stdout + result.stderr
    assert words.index("StrictHostKeyChecking=yes") < words.index("StrictHostKeyChecking=no"), \
        "ssh keeps the first value of an option: the wrapper's must come first"
    assert "tfdist.launch.remote_task" in result.stdout and "--shell" in result.stdout


def test_the_static_horovod_command_gets_the_same_wrapper(tmp_path):
    argv = with_ssh_wrapper(["horovodrun", "-np", "2", "-H", "h1:1,h2:1"], tmp_path, path=os.environ["PATH"])
    assert argv[:2] == ["env", f"PATH={tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"]
    assert argv[2:] == ["horovodrun", "-np", "2", "-H", "h1:1,h2:1"]
    assert (tmp_path / "bin" / "ssh").stat().st_mode & 0o111


def test_no_ssh_is_refused_with_the_package_to_install(tmp_path):
    with pytest.raises(LaunchError, match="no `ssh` on PATH .*openssh-client"):
        elastic_horovodrun_command(COMMAND, "h1:1,h2:1", min_np=1, max_np=2, np=None, workdir=tmp_path,
                                   horovodrun="horovodrun", path=str(tmp_path / "empty"))


@pytest.mark.parametrize("hosts, min_np, max_np, np, message", [
    ("h1:1,,h2:1", 1, 2, None, "has an empty entry"),
    ("h1:x", 1, 2, None, "'h1:x' has slots 'x'"),
    ("h1:0", 1, 2, None, "'h1:0' has 0 slots"),
    ("h1:1,h1:2", 1, 2, None, "lists host 'h1' twice"),
    ("-oProxyCommand=x:1", 1, 1, None, "'-oProxyCommand=x' is not a valid DNS name"),  # never an ssh option
    ("h1:1,h2:1", 0, 2, None, "--min-np is 0"),
    ("h1:1,h2:1", 2, 1, None, "--max-np is 1, below --min-np 2"),
    ("h1:1,h2:1", 3, None, None, "--min-np 3 needs more slots than --hosts 'h1:1,h2:1' has (2)"),
    ("h1:1,h2:1", 1, 2, 3, "-np 3 is outside --min-np 1 .. --max-np 2"),
    ("h1:1,h2:1", 1, None, 3, "-np 3 needs 3 slots but --hosts 'h1:1,h2:1' has 2"),
])
def test_bad_requests_name_the_option_and_the_fix(tmp_path, hosts, min_np, max_np, np, message):
    with pytest.raises(LaunchError) as info:
        elastic_horovodrun_command(COMMAND, hosts, min_np=min_np, max_np=max_np, np=np, workdir=tmp_path,
                                   horovodrun="horovodrun")
    assert isinstance(info.value, TfdistError)
    assert message in str(info.value) and "; fix: " in str(info.value)
    assert not (tmp_path / DISCOVERY_SCRIPT).exists()  # nothing written for a refused request


def test_no_command_is_refused(tmp_path):
    with pytest.raises(LaunchError, match="no command to launch"):
        elastic_horovodrun_command([], "h1:1,h2:1", min_np=1, max_np=2, np=None, workdir=tmp_path)


def test_hosts_parse_like_every_other_hosts_option(tmp_path):
    """One parser for --hosts (tfdist.launch.hosts): spaces and a missing :SLOTS as everywhere."""
    argv = elastic_horovodrun_command(COMMAND, "h1:2, h2 ,h3:1", min_np=1, max_np=None, np=None, workdir=tmp_path,
                                      horovodrun="horovodrun")
    assert "[('h1', 2), ('h2', 1), ('h3', 1)]" in (tmp_path / DISCOVERY_SCRIPT).read_text()
    assert _flag(argv, "-np") == "1"


def _run(script: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(script)], capture_output=True, text=True, timeout=30, check=False)


def test_the_script_lists_exactly_the_hosts_that_accept_connections(tmp_path):
    """127.0.0.1 listens on the port; 127.0.0.2 and 127.0.0.3 (same loopback) do not."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        script = write_discovery_script(tmp_path, [("127.0.0.2", 1), ("127.0.0.1", 2), ("127.0.0.3", 4)], port)
        assert script.stat().st_mode & 0o111, "horovodrun runs the script itself: it must be executable"
        first = _run(script)
        assert first.returncode == 0, first.stderr
        assert first.stdout == "127.0.0.1:2\n"
    closed = _run(script)  # the port is closed now: no host is up, and that is not an error
    assert closed.returncode == 0, closed.stderr
    assert closed.stdout == ""


def test_the_script_runs_with_the_interpreter_it_names(tmp_path):
    script = write_discovery_script(tmp_path, [("h1", 1)], 22)
    assert script.read_text().splitlines()[0] == f"#!{sys.executable}"
    again = write_discovery_script(tmp_path, [("h2", 1)], 22)  # rewritten in place for a new job
    assert again == script and "'h2'" in script.read_text() and "'h1'" not in script.read_text()
