"""Launchers: a tf.distribute cluster of processes (on this machine, or on ``--hosts`` over ssh), or
horovodrun.

Layering: above the training layers (it starts them as processes, never imports them): it may import
:mod:`tfdist.cluster` and the ground modules; the probe, the advisor, ``auto`` and the CLI import it.
"""
from tfdist.launch.hosts import HostsError, parse_hosts, place_tasks
from tfdist.launch.commands import (
    LaunchError,
    TaskProcess,
    find_horovodrun,
    horovodrun_command,
    plan_host_cluster,
    plan_local_cluster,
)
from tfdist.launch.policy import ParameterServerPolicy, PeerPolicy
from tfdist.launch.host_cluster import prepare_host_cluster
from tfdist.launch.remote import RemoteLaunchError, SshOptions

__all__ = ["HostsError", "LaunchError", "ParameterServerPolicy", "PeerPolicy", "RemoteLaunchError",
           "SshOptions", "TaskProcess", "find_horovodrun", "horovodrun_command", "parse_hosts", "place_tasks",
           "plan_host_cluster", "plan_local_cluster", "prepare_host_cluster"]
