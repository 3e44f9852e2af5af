"""The pure parts of tfdist.testing.slurmlab, without SLURM or root: the slurm.conf text, the node lines,
the checks on names and ports, and the readers of sinfo and scontrol output. The cluster itself runs in
tests/multihost/test_slurm.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from tfdist.testing.slurmlab import (
    SlurmConfig,
    SlurmLabError,
    node_line,
    not_idle,
    parse_job_state,
    parse_node_states,
    slurm_conf,
)

CONFIG = SlurmConfig(cluster_name="tfl42n1", controller="h0", controller_address="198.18.7.2",
                     nodes=(("h1", "198.18.7.3"), ("h2", "198.18.7.4")), ctld_port=40001, slurmd_port=40002,
                     directory=Path("/run/tfdist-labs/tfl42n1/slurm"), cpus=4)


def settings(text: str) -> dict[str, str]:
    """``Key=value`` lines of slurm.conf (not NodeName/PartitionName lines, which hold several)."""
    pairs = [line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")]
    return {key: value for key, value in pairs if key not in ("NodeName", "PartitionName")}


def test_node_line_declares_address_port_and_cpus():
    assert node_line("h1", "198.18.7.3", 4, 40002) == \
        "NodeName=h1 NodeAddr=198.18.7.3 Port=40002 CPUs=4 State=UNKNOWN"


def test_the_conf_ties_every_daemon_to_the_labs_munged_ports_and_files():
    text = slurm_conf(CONFIG)
    conf = settings(text)
    d = "/run/tfdist-labs/tfl42n1/slurm"
    assert conf["SlurmctldHost"] == "h0(198.18.7.2)"
    assert (conf["SlurmctldPort"], conf["SlurmdPort"]) == ("40001", "40002")
    assert conf["AuthType"] == "auth/munge" and conf["AuthInfo"] == f"socket={d}/munge/munge.socket"
    # every file of every daemon under the lab's directory, each slurmd's own by its node name (%n)
    assert conf["SlurmdSpoolDir"] == f"{d}/spool/%n"
    assert conf["SlurmdPidFile"] == f"{d}/slurmd-%n.pid" and conf["SlurmdLogFile"] == f"{d}/slurmd-%n.log"
    paths = [value for key, value in conf.items() if key.endswith(("File", "Dir", "Location"))]
    assert len(paths) == 6 and all(path.startswith(d + "/") for path in paths)
    assert conf["SlurmdParameters"] == "config_overrides"  # 4 CPUs declared on a 2-core machine
    assert (conf["ProctrackType"], conf["TaskPlugin"]) == ("proctrack/linuxproc", "task/none")  # no cgroups
    # a cut node is DOWN within a test's patience (the node-cut tests of test_slurm.py wait for it)
    assert int(conf["SlurmdTimeout"]) <= 30 and conf["ReturnToService"] == "2"
    node_lines = [line for line in text.splitlines() if line.startswith("NodeName=")]
    assert node_lines == [node_line("h1", "198.18.7.3", 4, 40002), node_line("h2", "198.18.7.4", 4, 40002)]
    assert text.splitlines()[-1] == "PartitionName=lab Nodes=h1,h2 Default=YES MaxTime=INFINITE State=UP"
    keys = [line.split("=", 1)[0] for line in text.splitlines()
            if "=" in line and not line.startswith("Node")]
    assert len(keys) == len(set(keys)), "a setting is written twice"


@pytest.mark.parametrize("change, words", [
    ({"controller": "H0"}, "`controller` 'H0' is not a SLURM name"),
    ({"nodes": (("h_1", "198.18.7.3"),)}, "`nodes` 'h_1'"),
    ({"nodes": ()}, "`nodes` is empty"),
    ({"controller": "h1"}, "`controller` 'h1' is also a node"),
    ({"ctld_port": 0}, "`ctld_port` 0 is not a port"),
    ({"cpus": 0}, "`cpus` is 0"),
])
def test_a_config_slurmctld_would_refuse_is_refused_naming_the_field(change, words):
    import dataclasses

    with pytest.raises(SlurmLabError, match="; fix: ") as caught:
        slurm_conf(dataclasses.replace(CONFIG, **change))
    assert words in str(caught.value)


def test_sinfo_states_and_the_nodes_not_idle():
    states = parse_node_states("h1 idle\nh2 down*\n\n")
    assert states == {"h1": "idle", "h2": "down*"}
    assert not_idle(states, ["h1", "h2", "h3"]) == {"h2": "down*", "h3": "absent"}
    assert not_idle(parse_node_states("h1 idle\nh2 idle\n"), ["h1", "h2"]) == {}


def test_job_state_from_scontrol():
    shown = "JobId=7 JobName=tfdist\n   UserId=root(0) GroupId=root(0)\n   JobState=CANCELLED Reason=None\n"
    assert parse_job_state(shown) == "CANCELLED"
    assert parse_job_state("slurm_load_jobs error: Invalid job id specified") is None


def test_a_node_that_stays_out_names_the_daemons_and_carries_their_logs(tmp_path, monkeypatch):
    """The lab's directory (logs included) goes when the cluster closes, so a failed resume must carry
    the logs in its message rather than point at files that will be gone."""
    import subprocess
    from dataclasses import replace

    from tfdist.testing.slurmlab import SlurmLab

    directory = tmp_path / "slurm"
    directory.mkdir()
    (directory / "slurmd-h2.log").write_text("error: Unable to register: Connection timed out\n")
    ended = subprocess.Popen(["false"])  # a daemon that exited with 1
    ended.wait()
    cluster = SlurmLab.__new__(SlurmLab)  # only what resume reads
    cluster.config, cluster._daemons = replace(CONFIG, directory=directory), {"slurmd@h2": ended}
    monkeypatch.setattr(cluster, "node_states", lambda: {"h1": "idle", "h2": "down*"})
    with pytest.raises(SlurmLabError) as failure:
        cluster.resume(["h2"], timeout=0)
    message = str(failure.value)
    assert "{'h2': 'down*'} (slurmd@h2 exited with 1)" in message
    assert "slurmd-h2.log: error: Unable to register" in message


def test_a_node_not_responding_past_restart_after_gets_its_slurmd_restarted_once(monkeypatch):
    """After a cut and restore, SLURM 22.05 now and then never heard from the node's running slurmd again
    (h3 `down*` for 120 s, every daemon running): resume restarts that slurmd, once, and the node comes
    back; a node that answers is only resumed."""
    from tfdist.testing.slurmlab import SlurmLab

    cluster = SlurmLab.__new__(SlurmLab)  # only what resume reads
    cluster.config = CONFIG
    seen = iter([{"h1": "idle", "h2": "down*"}] * 3 + [{"h1": "idle", "h2": "down"}, {"h1": "idle", "h2": "idle"}])
    monkeypatch.setattr(cluster, "node_states", lambda: next(seen))
    restarted, ran = [], []
    monkeypatch.setattr(cluster, "restart_slurmd", restarted.append)
    monkeypatch.setattr(cluster, "run", lambda argv, **kwargs: ran.append(argv))
    monkeypatch.setattr("tfdist.testing.slurmlab.time.sleep", lambda seconds: None)
    cluster.resume(["h2"], timeout=60, restart_after=0)
    assert restarted == ["h2"]
    assert ran == [["scontrol", "update", "nodename=h2", "state=resume"]]


def test_a_failed_resume_says_which_slurmd_it_restarted(monkeypatch):
    import subprocess

    from tfdist.testing.slurmlab import SlurmLab

    running = subprocess.Popen(["sleep", "30"])
    try:
        cluster = SlurmLab.__new__(SlurmLab)
        cluster.config, cluster._daemons = CONFIG, {"slurmd@h2": running}
        monkeypatch.setattr(cluster, "node_states", lambda: {"h1": "idle", "h2": "down*"})
        monkeypatch.setattr(cluster, "restart_slurmd", lambda node: None)
        monkeypatch.setattr(cluster, "logs", lambda: "")
        monkeypatch.setattr("tfdist.testing.slurmlab.time.sleep", lambda seconds: None)
        with pytest.raises(SlurmLabError) as failure:
            cluster.resume(["h2"], timeout=0.2, restart_after=0)
        assert "{'h2': 'down*'} (every daemon runs; slurmd restarted on h2 after 0 s)" in str(failure.value)
    finally:
        running.kill()
        running.wait()
