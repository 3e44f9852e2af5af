"""The ssh wrapper horovodrun uses (tfdist.launch.ssh_wrapper): its argv rewriting (pure), the real
ssh it finds, and the script install() writes. The supervision it relies on is tested in
tests/launch/test_processes.py (shell mode, run locally without ssh)."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from tfdist.launch import ssh_wrapper
from tfdist.launch.ssh_wrapper import (
    WRAPPER_OPTIONS,
    SshWrapperError,
    install,
    real_ssh,
    rewrite,
    split_ssh_argv,
)
from support import subprocess_env

PY = "/venv/bin/python"


def _remote(argv: list[str]) -> list[str]:
    """The words of the rewritten remote command, as the remote shell splits them."""
    return shlex.split(argv[-1])


def test_horovods_launch_command_is_rewritten_with_our_options_first():
    # gloo_run: `ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no h1 -p 2222 -i /k 'cd /w ; cmd'`
    command = "cd /w > /dev/null 2>&1 ; HOROVOD_RANK=1 python train.py --lr '0.1'"
    argv = ["-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", "h1", "-p", "2222",
            "-i", "/k",
            command]
    out = rewrite(argv, "/usr/bin/ssh", PY)
    assert out[0] == "/usr/bin/ssh"
    assert out[1:1 + len(WRAPPER_OPTIONS)] == list(WRAPPER_OPTIONS)
    # ssh keeps the first value of an option: ours come before Horovod's `no`
    strict = [out[i + 1] for i, word in enumerate(out)
              if word == "-o" and "StrictHostKeyChecking" in out[i + 1]]
    assert strict == ["StrictHostKeyChecking=yes", "StrictHostKeyChecking=no"]
    assert out[-2] == "h1" and "-p" in out and out[out.index("-p") + 1] == "2222"
    assert out[out.index("-i") + 1] == "/k"
    assert _remote(out) == [PY, "-m", "tfdist.launch.remote_task", "--shell", command]


def test_an_unquoted_multi_word_command_is_joined_as_ssh_joins_it():
    # driver_service: the task_fn command is not quoted, so ssh receives several words
    argv = ["-o", "StrictHostKeyChecking=no", "h2", "-o", "ConnectTimeout=10", "python", "-m",
            "horovod.runner.task_fn", "abc=", "de+f/"]
    options, host, command = split_ssh_argv(argv)
    assert host == "h2" and command == ["python", "-m", "horovod.runner.task_fn", "abc=", "de+f/"]
    assert options == ["-o", "StrictHostKeyChecking=no", "-o", "ConnectTimeout=10"]
    assert _remote(rewrite(argv, "ssh", PY))[-1] == "python -m horovod.runner.task_fn abc= de+f/"


@pytest.mark.parametrize("argv, options, host, command", [
    (["-p22", "-oBatchMode=no", "h", "true"], ["-p22", "-oBatchMode=no"], "h", ["true"]),
    (["-tt", "-4", "h", "echo", "-p"], ["-tt", "-4"], "h", ["echo", "-p"]),  # -p after the command is its own
    (["-l", "root", "--", "h", "-x"], ["-l", "root"], "h", ["-x"]),
    (["root@h", "-q", "ls"], ["-q"], "root@h", ["ls"]),
])
def test_options_are_split_the_way_openssh_parses_them(argv, options, host, command):
    assert split_ssh_argv(argv) == (options, host, command)


def test_quotes_and_dollars_reach_the_remote_shell_unchanged():
    command = """cd '/w d' ; X="a b" python -c 'print("$HOME")' && echo `id`"""
    assert _remote(rewrite(["h", command], "ssh", PY))[-1] == command


@pytest.mark.parametrize("argv, message", [
    (["-p"], "has no value"),
    (["-Z", "h", "true"], "unknown ssh option -Z"),
    (["-p", "22"], "no host"),
    (["h"], "no remote command"),
])
def test_what_cannot_be_rewritten_is_refused_with_a_fix(argv, message):
    with pytest.raises(SshWrapperError, match=message) as caught:
        rewrite(argv, "ssh", PY)
    assert "; fix: " in str(caught.value)


def test_install_writes_a_script_that_runs_the_wrapper_and_real_ssh_skips_it(tmp_path):
    bin_dir = install(tmp_path)
    script = bin_dir / "ssh"
    assert bin_dir == tmp_path / "bin" and os.access(script, os.X_OK)
    assert shlex.split(script.read_text().splitlines()[1]) == ["exec", sys.executable, "-m",
                                                              "tfdist.launch.ssh_wrapper", "$@"]
    other = tmp_path / "other"
    other.mkdir()
    fake = other / "ssh"
    fake.write_text("#!/bin/sh\necho real \"$@\"\n")
    fake.chmod(0o755)
    path = os.pathsep.join([str(bin_dir), str(other)])
    assert real_ssh(path) == str(fake)
    with pytest.raises(SshWrapperError, match="no ssh client"):
        real_ssh(str(bin_dir))


def test_the_installed_wrapper_runs_the_real_ssh_with_the_rewritten_argv(tmp_path):
    bin_dir = install(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    fake = other / "ssh"  # prints its argv one per line, then exits 3 like a remote command failing
    fake.write_text("#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done\nexit 3\n")
    fake.chmod(0o755)
    env = subprocess_env(PATH=os.pathsep.join([str(bin_dir), str(other), os.environ.get("PATH", "")]))
    result = subprocess.run("ssh -o StrictHostKeyChecking=no h1 -p 22 'echo hi'", shell=True, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stderr
    words = result.stdout.splitlines()
    assert words[:len(WRAPPER_OPTIONS)] == list(WRAPPER_OPTIONS)
    assert words[-2] == "h1"
    assert shlex.split(words[-1]) == [sys.executable, "-m", "tfdist.launch.remote_task", "--shell", "echo hi"]


def test_main_refuses_a_bad_command_line_without_starting_ssh(capsys):
    assert ssh_wrapper.main(["-Z", "h", "true"]) == ssh_wrapper.EXIT_USAGE
    assert "tfdist ssh wrapper: unknown ssh option -Z" in capsys.readouterr().err
