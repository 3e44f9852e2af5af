"""Cluster specs and TF_CONFIG: pure functions and frozen dataclasses, importable without TensorFlow.

The renderers for other schedulers (Kubernetes manifests in ``k8s``, SLURM batch scripts in ``sbatch``)
load on first use, so a training task that reads TF_CONFIG does not load them. This package imports
only :mod:`tfdist.errors` and :mod:`tfdist.atomic_write` of tfdist.

>>> from tfdist.cluster import ClusterSpec, all_tf_configs, render_env
>>> spec = ClusterSpec.from_dict({"chief": ["h1:2222"], "worker": ["h2:2222"], "ps": ["h3:2222"]})
>>> list(all_tf_configs(spec))
['chief:0', 'worker:0', 'ps:0']

Layering: the lowest package: it imports only the ground modules (``tfdist.errors``,
``tfdist.atomic_write``); ``k8s`` and ``sbatch`` load on first use, so a training task never loads them.
"""
from tfdist.cluster.build import ClusterOptions, build_cluster
from tfdist.cluster.errors import ClusterConfigError, ClusterOptionError, Problem
from tfdist.cluster.files import load_cluster_file
from tfdist.cluster.limits import MAX_DEPTH, MAX_EVERY_TASK, MAX_INPUT_BYTES, MAX_TASKS
from tfdist.cluster.render import render_env, render_json, write_dir
from tfdist.cluster.slurm import expand_hostlist, slurm_cluster, slurm_tf_config
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

#: Names of the scheduler renderers, loaded from their module on first use (PEP 562).
_LAZY = {"K8S_MODES": "k8s", "TaskResources": "k8s", "k8s_manifests": "k8s", "parse_cpu": "k8s",
         "parse_memory": "k8s", "render_k8s": "k8s", "BatchJob": "sbatch", "render_sbatch": "sbatch"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"tfdist.cluster.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tfdist.cluster' has no attribute {name!r}")
