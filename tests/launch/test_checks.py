"""What `tfdist launch` checks before anything starts (tfdist/launch/checks.py): pure, one line each."""
from __future__ import annotations

import pytest

from tfdist.cluster.limits import MAX_TASKS
from tfdist.launch.checks import check_cluster_size, check_host_options, check_placement, horovod_ranks
from tfdist.launch.hosts import HostsError
from tfdist.launch.commands import LaunchError


@pytest.mark.parametrize("kwargs, message", [
    ({"hosts": ""}, "--hosts is empty; fix: "),
    ({"hosts": " \t"}, "--hosts is empty; fix: "),
    ({"hosts": "a:1", "chief_host": ""}, "--chief-host is empty; fix: "),
    ({"hosts": "a:1", "ps_hosts": " "}, "--ps-hosts is empty; fix: "),
    ({"hosts": "a,,b"}, "--hosts 'a,,b' has an empty entry"),
    ({"hosts": "a:" + "9" * 5000}, "slots; fix: give each host 1 to 1024 slots"),
])
def test_host_options(kwargs, message):
    with pytest.raises(HostsError) as info:
        check_host_options(**kwargs)
    assert message in str(info.value) and len(str(info.value)) < 400


def test_host_options_accept_none_and_a_list():
    check_host_options(None)
    check_host_options("h1:2,h2", "h1", "h2")


def test_cluster_size_is_tf_configs_limit():
    assert check_cluster_size(MAX_TASKS - 2, 1) == MAX_TASKS
    assert check_cluster_size(MAX_TASKS, 0, chief=False) == MAX_TASKS
    with pytest.raises(LaunchError, match=r"the cluster has 10,001 tasks \(1 chief \+ 9999 worker\(s\) \+ 1 ps\); "
                                          r"tfdist's limit is 10,000 tasks per cluster; fix: "):
        check_cluster_size(MAX_TASKS - 1, 1)


@pytest.mark.parametrize("kwargs, message", [
    ({"hosts": "a:1,b:1", "workers": 2, "ps": 1}, "the job needs 3 slots (2 worker + 1 ps) but --hosts gives 2"),
    ({"hosts": "a:2,b:2", "workers": 1, "ps": 1, "ps_hosts": "c"}, "--ps-hosts names 'c', which is not in --hosts"),
    ({"hosts": "a:2,b:2", "workers": 1, "ps": 1, "ps_hosts": "b,"}, "--ps-hosts 'b,' has an empty entry"),
    ({"hosts": "localhost:2,b:2", "workers": 1, "ps": 1}, "beside other hosts"),
])
def test_placement(kwargs, message):
    with pytest.raises(HostsError) as info:
        check_placement(**kwargs)
    assert message in str(info.value)


def test_a_long_unknown_host_is_shortened_in_the_message():
    with pytest.raises(HostsError) as info:
        check_placement("a:2,b:2", 1, 1, ps_hosts="x" * 5000)
    assert len(str(info.value)) < 500 and "(5000 characters)" in str(info.value)


@pytest.mark.parametrize("args, ranks", [
    ((None, None), 2), ((None, 7), 7), (("a:2,b:3", None), 5), (("a:2,b:3", 4), 4),
    (("a:2,b:3", None, True, 1), 1), (("a:2,b:3", 3, True, 1, 4), 3),
])
def test_horovod_ranks(args, ranks):
    assert horovod_ranks(*args) == ranks


@pytest.mark.parametrize("args, message", [
    (("a:1", 2), "-np 2 needs 2 slots but --hosts a:1 gives 1; fix: add slots to --hosts, or drop -np (it defaults "
                 "to the 1 slots)"),
    (("a:1,b:1", 3, True, 1), "or drop -np (it defaults to --min-np 1)"),
    (("a:1,b:1", 2, True, 1, 1), "-np 2 is outside --min-np 1 .. --max-np 1"),
    (("a:1", None, True), "--elastic needs --min-np"),
    ((None, MAX_TASKS + 1), "above tfdist's limit of 10,000 ranks"),
    ((",".join(f"h{i}:1024" for i in range(10)), None), "--hosts gives 10,240 slots, above tfdist's limit"),
])
def test_horovod_ranks_refused(args, message):
    with pytest.raises(LaunchError) as info:
        horovod_ranks(*args)
    assert message in str(info.value)


# --- --network-interface: a Linux interface name, never anything a shell reads (issue 34) -----------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from support import examples  # noqa: E402
from tfdist.launch.checks import (INTERFACE_NAME, check_local_command, check_network_interface,  # noqa: E402
                                  python_script)

_SHELL = set("`$;&|<>(){}[]*?!~#'\"\\ \t\n")


@pytest.mark.parametrize("name", ["eth0", "lo", "ib0", "enp0s31f6", "br-1a2b3c4d5e6f", "eth0.100", "wlan_1",
                                  "a" * 15, "docker0", "veth1a2b3c4"])
def test_real_interface_names_are_accepted(name):
    assert check_network_interface(name) == name


@pytest.mark.parametrize("name, why", [
    ("eth0;reboot", "is not an interface name"), ("$(id)", "is not an interface name"),
    ("a/b", "is not an interface name"), ("eth0:1", "is not an interface name"),
    ("eth0 ", "is not an interface name"), (".", "is not an interface name"), ("..", "is not an interface name"),
    ("ｅｔｈ０", "is not an interface name"), ("eth0,eth1", "names several interfaces"),
    ("a" * 16, "is longer than the 15 characters Linux allows"),
    ("a" * 5000, "is longer than the 15 characters Linux allows"),
])
def test_other_names_are_refused_naming_the_option_and_the_fix(name, why):
    with pytest.raises(LaunchError) as info:
        check_network_interface(name)
    message = str(info.value)
    assert message.startswith("--network-interface '") and why in message and len(message) < 400
    assert message.endswith("fix: give a name that `ip -brief link` lists, e.g. --network-interface eth0")


@settings(max_examples=examples(500), deadline=None)
@given(st.text(max_size=40))
def test_an_accepted_name_is_a_valid_linux_name_the_shell_cannot_read(name):
    """Linux (dev_valid_name): 1-15 bytes, no '/', ':' or whitespace, not '.' or '..'; and no character a
    shell would act on. Whatever else is given raises a one-line LaunchError, never another exception."""
    try:
        accepted = check_network_interface(name)
    except LaunchError as exc:
        assert "\n" not in str(exc).replace(repr(name), "") and "fix: " in str(exc)
        return
    assert accepted == name and 1 <= len(name.encode()) <= 15 and name not in (".", "..")
    assert not set(name) & (_SHELL | {"/", ":", ","}) and name.isascii() and not any(c.isspace() for c in name)


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=15))
def test_every_name_of_the_conservative_alphabet_is_accepted(name):
    if name in (".", ".."):
        return
    assert INTERFACE_NAME.fullmatch(name) and check_network_interface(name) == name


# --- the script of a local run exists before anything starts -------------------------------------------------
@pytest.mark.parametrize("command, script", [
    (["python", "train.py"], "train.py"), (["python3.11", "-u", "t.py", "--epochs", "2"], "t.py"),
    (["/venv/bin/python", "-W", "ignore", "t.py"], "t.py"), (["python", "-Wignore", "-X", "dev", "t.py"], "t.py"),
    (["python", "-OO", "--", "t.py"], "t.py"), (["python", "-c", "import x"], None), (["python", "-m", "pkg"], None),
    (["python", "-uc", "pass"], None), (["python", "-"], None), (["python"], None), (["python", "--version"], None),
    (["bash", "run.sh"], None), (["python3-config", "x"], None), (["torchrun", "t.py"], None),
])
def test_python_script(command, script):
    assert python_script(command) == script


def test_check_local_command(tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    check_local_command(["python3", "train.py"], str(tmp_path))
    check_local_command(["python3", "-m", "not_a_file"], str(tmp_path))
    for command, message in (
            (["python3", "trian.py"], f"the script 'trian.py' does not exist in {tmp_path}; fix: check its name"),
            (["./run.sh"], "'./run.sh' is not executable; fix: chmod +x ./run.sh"),
            (["./none.sh"], f"'./none.sh' does not exist (from {tmp_path}); fix: "),
            (["no-such-program-xyz"], "'no-such-program-xyz' is not an executable on PATH; fix: give the full path"),
            ([], "no command to launch; fix: ")):
        with pytest.raises(LaunchError) as info:
            check_local_command(command, str(tmp_path))
        assert str(info.value).startswith(message), str(info.value)
