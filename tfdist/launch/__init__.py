"""Local launchers: a parameter-server cluster of processes, or horovodrun."""
from tfdist.launch.plan import LaunchError, TaskProcess, horovodrun_command, plan_local_cluster

__all__ = ["LaunchError", "TaskProcess", "horovodrun_command", "plan_local_cluster"]
