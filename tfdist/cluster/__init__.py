"""Cluster specs and TF_CONFIG: pure functions and frozen dataclasses, importable without TensorFlow.

>>> from tfdist.cluster import ClusterSpec, all_tf_configs, render_env
>>> spec = ClusterSpec.from_dict({"chief": ["h1:2222"], "worker": ["h2:2222"], "ps": ["h3:2222"]})
>>> list(all_tf_configs(spec))
['chief:0', 'worker:0', 'ps:0']
"""
from tfdist.cluster.build import ClusterOptions, build_cluster
from tfdist.cluster.errors import ClusterConfigError, ClusterOptionError, Problem
from tfdist.cluster.files import load_cluster_file
from tfdist.cluster.limits import MAX_DEPTH, MAX_EVERY_TASK, MAX_INPUT_BYTES, MAX_TASKS
from tfdist.cluster.k8s import (
    K8S_MODES,
    TaskResources,
    k8s_manifests,
    parse_cpu,
    parse_memory,
    render_k8s,
)
from tfdist.cluster.render import render_env, render_json, write_dir
from tfdist.cluster.slurm import expand_hostlist, slurm_cluster, slurm_tf_config
from tfdist.cluster.sbatch import BatchJob, render_sbatch
from tfdist.cluster.source import SourceCheck, check_source
from tfdist.cluster.spec import (
    TASK_TYPES,
    TRAINING_TASK_TYPES,
    Address,
    ClusterSpec,
    free_ports,
    local_cluster,
    round_robin_cluster,
)
from tfdist.cluster.tf_config import TF_CONFIG_ENV, TFConfig, all_tf_configs, parse_task, tf_config_for
from tfdist.cluster.validate import check, validate_cluster, validate_tf_config, warnings_for

__all__ = [
    "K8S_MODES", "MAX_DEPTH", "MAX_EVERY_TASK", "MAX_INPUT_BYTES", "MAX_TASKS", "TASK_TYPES",
    "TF_CONFIG_ENV", "TFConfig", "TRAINING_TASK_TYPES", "Address", "BatchJob", "ClusterConfigError",
    "ClusterOptionError", "ClusterOptions", "ClusterSpec", "Problem", "SourceCheck", "TaskResources",
    "all_tf_configs", "build_cluster", "check", "check_source", "expand_hostlist", "free_ports",
    "k8s_manifests", "load_cluster_file", "local_cluster", "parse_cpu", "parse_memory", "parse_task",
    "render_env", "render_json", "render_k8s", "render_sbatch", "round_robin_cluster", "slurm_cluster",
    "slurm_tf_config", "tf_config_for", "validate_cluster", "validate_tf_config", "warnings_for", "write_dir",
]
