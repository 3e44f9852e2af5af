"""Renderers of TF_CONFIGs: JSON, shell ``export`` lines, Kubernetes YAML, one file per task.

All but :func:`write_dir` are pure and return strings.

>>> from tfdist.cluster.spec import Address, ClusterSpec
>>> from tfdist.cluster.tf_config import all_tf_configs
>>> print(render_env(all_tf_configs(ClusterSpec(worker=[Address("h", 1)]))), end="")
# worker:0
export TF_CONFIG='{"cluster":{"worker":["h:1"]},"task":{"type":"worker","index":0}}'
"""
from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tfdist.cluster.errors import ClusterConfigError, Problem
from tfdist.errors import ArgumentValueError
from tfdist.cluster.spec import TASK_TYPES, TRAINING_TASK_TYPES, Address, ClusterSpec
from tfdist.cluster.tf_config import TF_CONFIG_ENV, check_every_task, tf_config_for

K8S_MODES = ("tfjob", "plain")
#: The container name and port name that the Kubeflow training operator requires.
TFJOB_CONTAINER = "tensorflow"
TFJOB_PORT_NAME = "tfjob-port"
_REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")


def compact_json(obj: Any) -> str:
    """JSON with no spaces, as TF_CONFIG is usually written in environments."""
    return json.dumps(obj, separators=(",", ":"))


def render_json(configs: Mapping[str, Mapping[str, Any]], *, single: bool = False,
                indent: int | None = 2) -> str:
    """One JSON object ``{"type:index": TF_CONFIG}``; with `single`, the one TF_CONFIG itself."""
    if single:
        if len(configs) != 1:
            raise ArgumentValueError(f"single=True needs exactly one TF_CONFIG, got {len(configs)}; "
                                     "fix: select one task first (--task)")
        (obj,) = configs.values()
    else:
        obj = configs
    return json.dumps(obj, indent=indent) + "\n"


def render_env(configs: Mapping[str, Mapping[str, Any]]) -> str:
    """``# type:index`` and ``export TF_CONFIG='...'`` per task; a POSIX shell reads back the exact JSON."""
    return "".join(f"# {name}\nexport {TF_CONFIG_ENV}={shlex.quote(compact_json(config))}\n"
                   for name, config in configs.items())


def file_name(name: str) -> str:
    """``"worker:1"`` -> ``"worker-1.json"``."""
    return name.replace(":", "-") + ".json"


def write_dir(configs: Mapping[str, Mapping[str, Any]], directory: str | os.PathLike[str]) -> list[Path]:
    """Write one ``type-index.json`` per task into `directory` (created if needed), each atomically.

    Each file is written to a temporary file in the same directory, fsynced, then renamed over the
    target with ``os.replace``, so a crash never leaves a half-written TF_CONFIG.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, config in configs.items():
        target = root / file_name(name)
        _atomic_write(target, compact_json(config) + "\n")
        paths.append(target)
    _fsync_directory(root)
    return paths


def render_k8s(spec: ClusterSpec, image: str, command: Sequence[str] = (), name: str = "tfdist",
               mode: str = "tfjob") -> str:
    """Kubernetes YAML for the cluster.

    ``mode="tfjob"``: one Kubeflow ``kubeflow.org/v1`` TFJob; the training operator creates the
    services and sets TF_CONFIG itself, so hosts of `spec` are ignored and only the replica counts
    and each type's first port are used. ``mode="plain"``: a headless Service per training task and
    a Pod per task with its own TF_CONFIG; the hosts become the Service names
    ``<name>-<type>-<index>`` and the ports of `spec` are kept.
    """
    problems = _k8s_problems(spec, image, name, mode)
    if problems:
        raise ClusterConfigError(problems)
    if mode == "tfjob":
        docs = [_tfjob(spec, image, list(command), name)]
    else:
        check_every_task(spec)  # a Pod with the whole cluster's TF_CONFIG per task: quadratic
        docs = _plain(spec, image, list(command), name)
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)


def k8s_service_spec(spec: ClusterSpec, name: str) -> ClusterSpec:
    """`spec` with every host replaced by its Service name ``<name>-<type>-<index>``."""
    return ClusterSpec(**{
        t: tuple(Address(f"{name}-{t}-{i}", a.port) for i, a in enumerate(spec.addresses(t)))
        for t in TASK_TYPES})


def _k8s_problems(spec: ClusterSpec, image: str, name: str, mode: str) -> list[Problem]:
    problems = []
    if mode not in K8S_MODES:
        problems.append(Problem("mode", f"unknown Kubernetes mode {mode!r}",
                                f"use one of {', '.join(K8S_MODES)}"))
    if not isinstance(image, str) or not image.strip():
        problems.append(Problem("image", "no container image given",
                                "pass the image, e.g. 'my-registry/train:1.0'"))
    longest = max((len(f"{name}-{t}-{i}") for t, i in spec.tasks()), default=len(name))
    if not isinstance(name, str) or not _DNS_1035.match(name):
        problems.append(Problem("name", f"{name!r} is not a valid Kubernetes name",
                                "use lower-case letters, digits and '-', starting with a letter and ending "
                                "with a letter or digit"))
    elif longest > 63:
        problems.append(Problem("name", f"{name!r} makes Service names of {longest} characters; "
                                "the limit is 63", f"shorten the name by {longest - 63} characters"))
    return problems


def _container(image: str, command: list[str], port: int, port_name: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": TFJOB_CONTAINER, "image": image}
    if command:
        container["command"] = command
    container["ports"] = [{"name": port_name, "containerPort": port}]
    return container


def _tfjob(spec: ClusterSpec, image: str, command: list[str], name: str) -> dict[str, Any]:
    replicas = {}
    for task_type in TASK_TYPES:
        addresses = spec.addresses(task_type)
        if addresses:
            replicas[_REPLICA_TYPES[task_type]] = {
                "replicas": len(addresses),
                "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [_container(image, command, addresses[0].port,
                                                                TFJOB_PORT_NAME)]}},
            }
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name},
            "spec": {"tfReplicaSpecs": replicas}}


def _plain(spec: ClusterSpec, image: str, command: list[str], name: str) -> list[dict[str, Any]]:
    services = k8s_service_spec(spec, name)
    docs: list[dict[str, Any]] = []
    for task_type, index in services.tasks():
        address = services.address_of(task_type, index)
        labels = {"app.kubernetes.io/name": name, "tfdist/task": f"{task_type}-{index}"}
        if task_type in TRAINING_TASK_TYPES:
            ports = [{"name": "grpc", "port": address.port, "targetPort": address.port}]
            docs.append({"apiVersion": "v1", "kind": "Service",
                         "metadata": {"name": address.host, "labels": dict(labels)},
                         "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                                  "selector": dict(labels), "ports": ports}})
        container = _container(image, command, address.port, "grpc")
        config = compact_json(tf_config_for(services, task_type, index))
        container["env"] = [{"name": TF_CONFIG_ENV, "value": config}]
        docs.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": address.host, "labels": dict(labels)},
                     "spec": {"restartPolicy": "OnFailure", "containers": [container]}})
    return docs


def _atomic_write(target: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _fsync_directory(directory: Path) -> None:
    """Make the renames durable; not every platform can open a directory, so best effort."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
