"""Local launchers: a parameter-server cluster of processes, or horovodrun."""
from tfdist.launch.plan import LaunchError, TaskProcess, find_horovodrun, horovodrun_command, plan_local_cluster
from tfdist.launch.policy import ParameterServerPolicy, PeerPolicy

__all__ = ["LaunchError", "ParameterServerPolicy", "PeerPolicy", "TaskProcess", "find_horovodrun",
           "horovodrun_command", "plan_local_cluster"]
