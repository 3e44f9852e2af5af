"""Kubernetes manifests for a cluster: a Kubeflow TFJob, plain Pods and Services, an mpi-operator
MPIJob for Horovod, or a Kubeflow Trainer v2 TrainJob.

Pure: :func:`k8s_manifests` returns plain dicts (fresh on every call), :func:`render_k8s` their YAML;
nothing is sent to a cluster. Each mode's API version is a module constant; the tests validate every
manifest against the operators' published CRD schemas and Kubernetes' own (docs/kubernetes.md).

>>> from tfdist.cluster.spec import Address, ClusterSpec
>>> spec = ClusterSpec(worker=[Address("h1", 2222), Address("h2", 2222)])
>>> (job,) = k8s_manifests(spec, "reg/train:1", ["python", "train.py"], mode="mpijob")
>>> job["kind"], job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
('MPIJob', 2)
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import yaml

from tfdist.cluster.ascii_input import ascii_problem
from tfdist.cluster.errors import ClusterConfigError, Problem, shown
from tfdist.cluster.render import compact_json
from tfdist.cluster.spec import TASK_TYPES, TRAINING_TASK_TYPES, Address, ClusterSpec
from tfdist.cluster.tf_config import TF_CONFIG_ENV, check_every_task, tf_config_for
from tfdist.errors import ArgumentValueError

K8S_MODES = ("tfjob", "plain", "mpijob", "trainjob")
#: The modes that run Horovod under MPI: a cluster of workers only.
HOROVOD_MODES = ("mpijob", "trainjob")
TFJOB_API_VERSION = "kubeflow.org/v1"  # kubeflow/training-operator v1.9
MPIJOB_API_VERSION = "kubeflow.org/v2beta1"  # kubeflow/mpi-operator v0.8
TRAINJOB_API_VERSION = "trainer.kubeflow.org/v1alpha1"  # kubeflow/trainer v2.3
#: The container name and port name that the Kubeflow training operator requires.
TFJOB_CONTAINER = "tensorflow"
TFJOB_PORT_NAME = "tfjob-port"
#: Container names of the MPIJob, as in the mpi-operator's Horovod example.
MPI_LAUNCHER_CONTAINER = "mpi-launcher"
MPI_WORKER_CONTAINER = "mpi-worker"
#: The resource name of NVIDIA's device plugin; Kubernetes takes extended resources as limits.
GPU_RESOURCE = "nvidia.com/gpu"
#: Most GPUs one task may ask for (the largest GPU nodes have 16).
MAX_GPUS_PER_TASK = 64
#: The launcher's mpirun flags, from the mpi-operator's Horovod example (examples/v2beta1/horovod):
#: one process per slot, no binding, TCP (ob1) without InfiniBand; the operators write the hostfile
#: and point OpenMPI at it (OMPI_MCA_orte_default_hostfile), so no -H is needed.
MPIRUN_FLAGS = ("--allow-run-as-root", "-bind-to", "none", "-map-by", "slot", "-x", "LD_LIBRARY_PATH",
                "-x", "PATH", "-mca", "pml", "ob1", "-mca", "btl", "^openib")

#: The names the API server takes for a TFJob, MPIJob, TrainJob or Service (an RFC 1035 label) and their
#: longest; the TrainJob CRD states both as CEL rules on metadata.name, which a test compares with these.
DNS_1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
MAX_NAME_LENGTH = 63
#: What the operators' CRDs (vendored in tests/cluster/schemas/) limit in the fields that the options fill,
#: as (kind, field, JSON-schema keyword) -> limit; an API server refuses a manifest past one. The renderer
#: checks each before writing; tests/cluster/test_k8s_schemas.py reads every one back from the vendored
#: schema and fails on a limit of a written field that is missing here, so the two cannot drift.
CRD_LIMITS: Mapping[tuple[str, str, str], int] = MappingProxyType({
    ("TrainJob", "spec.trainer.image", "maxLength"): 500,
    ("TrainJob", "spec.trainer.command", "maxItems"): 128,
    ("TrainJob", "spec.trainer.command[]", "maxLength"): 1_048_576,
    ("TrainJob", "spec.runtimeRef.name", "maxLength"): 253,
    ("TrainJob", "spec.runtimeRef.name", "minLength"): 1,
})

_REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
_DNS_1035 = re.compile(DNS_1035_LABEL + r"\Z")
_DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_MAX_QUANTITY_TEXT = 24
_CPU = re.compile(r"(?:([0-9]+(?:\.[0-9]*)?|\.[0-9]+)|([0-9]+)m)\Z")
_MEMORY = re.compile(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?\Z")
_MEMORY_TYPOS = {"m": "Mi", "mi": "Mi", "mb": "M", "mib": "Mi", "g": "Gi", "gi": "Gi", "gb": "G",
                 "gib": "Gi", "ki": "Ki", "kb": "k", "kib": "Ki", "t": "Ti", "ti": "Ti", "tb": "T"}


def parse_cpu(text: str, field: str = "cpu") -> str:
    """A CPU request as Kubernetes writes it: cores (``2``, ``0.5``) or millicores (``500m``), above 0.

    Returns the text stripped; raises :class:`ArgumentValueError` naming `field` otherwise.
    """
    _refuse_non_ascii(str(text), field, "2 or 500m")
    value = str(text).strip()
    accepted = "a number of cores such as 2 or 0.5, or millicores such as 500m"
    match = _CPU.match(value) if len(value) <= _MAX_QUANTITY_TEXT else None
    if not match:
        raise ArgumentValueError(_message(field, f"{shown(value)} is not a CPU quantity; accepted: "
                                          f"{accepted}", "e.g. 2 or 500m"))
    cores, millis = match.groups()
    thousandths = float(cores) * 1000 if cores is not None else int(millis)
    if thousandths < 1:
        raise ArgumentValueError(_message(field, f"{shown(value)} is below 1m, the smallest CPU request "
                                          "Kubernetes keeps", "ask for 1m or more"))
    return value


def parse_memory(text: str, field: str = "memory") -> str:
    """A memory request as Kubernetes writes it: bytes, or a number with a suffix ``Ki``/``Mi``/``Gi``/
    ``Ti`` (powers of 1024) or ``k``/``M``/``G``/``T`` (powers of 1000), above 0.

    ``512m`` is refused: Kubernetes reads ``m`` as milli (0.512 bytes), a classic typo for ``512Mi``.
    """
    _refuse_non_ascii(str(text), field, "4Gi or 512Mi")
    value = str(text).strip()
    accepted = "bytes, or a number with Ki, Mi, Gi, Ti (powers of 1024) or k, M, G, T"
    if len(value) > _MAX_QUANTITY_TEXT:
        raise ArgumentValueError(_message(field, f"{shown(value)} is too long for a memory quantity; "
                                          f"accepted: {accepted}", "e.g. 4Gi"))
    match = _MEMORY.match(value)
    if not match:
        number = re.match(r"[0-9]+(?:\.[0-9]+)?", value)
        suffix = value[number.end():] if number else ""
        if number and suffix.lower() in _MEMORY_TYPOS:
            meaning = " (m is milli: thousandths of a byte)" if suffix == "m" else ""
            fix = f"use {number.group(0)}{_MEMORY_TYPOS[suffix.lower()]}"
            raise ArgumentValueError(_message(field, f"{shown(value)} has the suffix {suffix!r}{meaning}, "
                                              "which Kubernetes does not read as you meant; accepted: "
                                              f"{accepted}", fix))
        raise ArgumentValueError(_message(field, f"{shown(value)} is not a memory quantity; accepted: "
                                          f"{accepted}", "e.g. 4Gi or 512Mi"))
    number, suffix = match.groups()
    if float(number) == 0:
        raise ArgumentValueError(_message(field, f"{shown(value)} asks for no memory", "ask for more than 0, "
                                          "e.g. 4Gi, or leave the option out"))
    if suffix is None and "." in number:
        raise ArgumentValueError(_message(field, f"{shown(value)} is a fraction of a byte",
                                          f"give whole bytes or a suffix, e.g. {number}Gi"))
    return value


def _refuse_non_ascii(value: str, field: str, example: str) -> None:
    """Kubernetes reads quantities in ASCII only: ``"٢"`` or ``"１６Gi"`` would be written as is and
    refused by the API server (Python's ``float`` and ``\\d`` take any script's digits)."""
    problem = ascii_problem(value, example=example)
    if problem is not None:
        raise ArgumentValueError(_message(field, f"{shown(value)} {problem.message}, as Kubernetes reads them",
                                          problem.fix))


def _message(field: str, problem: str, fix: str) -> str:
    return f"{field}: {problem}; fix: {fix}" if field else f"{problem}; fix: {fix}"


@dataclass(frozen=True)
class TaskResources:
    """What each training task's container asks for: GPUs (``nvidia.com/gpu`` limits) and CPU and
    memory requests (Kubernetes quantities, checked by :func:`parse_cpu` / :func:`parse_memory`).

    >>> TaskResources(gpus=2, cpu="4", memory="16Gi").requirements()
    {'requests': {'cpu': '4', 'memory': '16Gi'}, 'limits': {'nvidia.com/gpu': 2}}
    """

    gpus: int = 0
    cpu: str | None = None
    memory: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) \
                or not 0 <= self.gpus <= MAX_GPUS_PER_TASK:
            problems.append(Problem("gpus", f"{shown(self.gpus)} is not a number of GPUs from 0 to "
                                    f"{MAX_GPUS_PER_TASK}", f"give 0 to {MAX_GPUS_PER_TASK}"))
        for name, parse in (("cpu", parse_cpu), ("memory", parse_memory)):
            value = getattr(self, name)
            if value is None:
                continue
            try:
                object.__setattr__(self, name, parse(value, field=""))
            except ArgumentValueError as exc:
                problem, _, fix = str(exc).rpartition("; fix: ")
                problems.append(Problem(name, problem, fix))
        if problems:
            raise ClusterConfigError(problems)

    @property
    def slots(self) -> int:
        """Horovod processes per task: one per GPU, else one."""
        return max(1, self.gpus)

    def requirements(self) -> dict[str, Any]:
        """The container's ``resources``: ``{}`` when nothing is asked for."""
        out: dict[str, Any] = {}
        requests = {k: v for k, v in (("cpu", self.cpu), ("memory", self.memory)) if v is not None}
        if requests:
            out["requests"] = requests
        if self.gpus:
            out["limits"] = {GPU_RESOURCE: self.gpus}
        return out


def render_k8s(spec: ClusterSpec, image: str, command: Sequence[str] = (), name: str = "tfdist",
               mode: str = "tfjob", *, resources: TaskResources | None = None,
               runtime: str | None = None) -> str:
    """The YAML of :func:`k8s_manifests`, one document per object."""
    docs = k8s_manifests(spec, image, command, name, mode, resources=resources, runtime=runtime)
    return yaml.dump_all(docs, Dumper=_NoAliasDumper, sort_keys=False, default_flow_style=False)


class _NoAliasDumper(yaml.SafeDumper):
    """PyYAML's safe dumper without anchors and aliases (``&id001`` / ``*id001``): every value is
    written out where it is used, as a reader (and tfdist's own YAML reader, which refuses aliases)
    expects."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def k8s_manifests(spec: ClusterSpec, image: str, command: Sequence[str] = (), name: str = "tfdist",
                  mode: str = "tfjob", *, resources: TaskResources | None = None,
                  runtime: str | None = None) -> list[dict[str, Any]]:
    """Kubernetes objects for the cluster, as plain dicts.

    * ``tfjob``: one Kubeflow ``kubeflow.org/v1`` TFJob; the training operator creates the Services and
      sets TF_CONFIG itself, so hosts of `spec` are ignored and only the replica counts and each
      type's first port are used.
    * ``plain``: a headless Service per training task and a Pod per task with its own TF_CONFIG; the
      hosts become the Service names ``<name>-<type>-<index>`` and the ports of `spec` are kept.
    * ``mpijob``: an mpi-operator ``kubeflow.org/v2beta1`` MPIJob for Horovod: a Launcher running
      ``mpirun -np WORKERS*SLOTS <command>`` and the Workers, in which the operator starts sshd (the
      image must have it); ``slotsPerWorker`` is one per GPU, else 1. Workers only.
    * ``trainjob``: a Kubeflow Trainer ``trainer.kubeflow.org/v1alpha1`` TrainJob for Horovod that
      references the ClusterTrainingRuntime `runtime` (one with an MPI mlPolicy), with the same
      mpirun command, ``numNodes`` and ``numProcPerNode``. Workers only.

    `resources` go to every chief, worker and evaluator container (ps tasks get the CPU and memory
    requests but no GPUs; an MPI launcher gets none). Raises :class:`ClusterConfigError` listing every
    problem of the arguments.
    """
    resources = TaskResources() if resources is None else resources
    if isinstance(command, str):
        raise ClusterConfigError([Problem("command", f"{shown(command)} is one string, not a list of words",
                                          "split it first, e.g. shlex.split('python train.py')")])
    problems = _problems(spec, image, list(command), name, mode, runtime)
    if problems:
        raise ClusterConfigError(problems)
    command = list(command)
    if mode == "tfjob":
        return [_tfjob(spec, image, command, name, resources)]
    if mode == "plain":
        check_every_task(spec)  # a Pod with the whole cluster's TF_CONFIG per task: quadratic
        return _plain(spec, image, command, name, resources)
    if mode == "mpijob":
        return [_mpijob(spec, image, command, name, resources)]
    return [_trainjob(spec, image, command, name, resources, str(runtime))]


def k8s_service_spec(spec: ClusterSpec, name: str) -> ClusterSpec:
    """`spec` with every host replaced by its Service name ``<name>-<type>-<index>``."""
    return ClusterSpec(**{
        t: tuple(Address(f"{name}-{t}-{i}", a.port) for i, a in enumerate(spec.addresses(t)))
        for t in TASK_TYPES})


def mpirun_command(workers: int, slots: int, command: Sequence[str]) -> list[str]:
    """The launcher's command: ``mpirun -np WORKERS*SLOTS`` with :data:`MPIRUN_FLAGS`, then `command`."""
    return ["mpirun", "-np", str(workers * slots), *MPIRUN_FLAGS, *command]


def _problems(spec: ClusterSpec, image: Any, command: list[str], name: Any, mode: Any,
              runtime: Any) -> list[Problem]:
    problems = []
    if mode not in K8S_MODES:
        problems.append(Problem("mode", f"unknown Kubernetes mode {shown(mode)}",
                                f"use one of {', '.join(K8S_MODES)}"))
    if not isinstance(image, str) or not image.strip():
        problems.append(Problem("image", "no container image given",
                                "pass the image, e.g. 'my-registry/train:1.0'"))
    elif image != image.strip():  # the API server's own check (Pod validation), not in any schema
        problems.append(Problem("image", f"{shown(image)} has leading or trailing whitespace, which the API "
                                "server refuses in an image", f"drop it: {shown(image.strip())}"))
    if not isinstance(name, str) or not _DNS_1035.match(name):
        problems.append(Problem("name", f"{shown(name)} is not a valid Kubernetes name",
                                "use lower-case letters, digits and '-', starting with a letter and ending "
                                "with a letter or digit"))
    else:
        longest = max((len(n) for n in _pod_names(spec, name, mode)), default=len(name))
        if longest > MAX_NAME_LENGTH:
            problems.append(Problem("name", f"{name!r} makes {_named(mode)} of {longest} characters; "
                                    f"the limit is {MAX_NAME_LENGTH}",
                                    f"shorten the name by {longest - MAX_NAME_LENGTH} characters"))
    if mode in HOROVOD_MODES:
        others = [f"{len(spec.addresses(t))} {t}" for t in ("chief", "ps", "evaluator") if spec.addresses(t)]
        if others:
            problems.append(Problem(
                "mode", f"--k8s-mode {mode} runs Horovod, whose cluster is workers only, but this cluster "
                f"has {' and '.join(others)}",
                "give only workers (--worker or --workers), or use --k8s-mode tfjob for a chief/ps cluster"))
        if not command:
            problems.append(Problem("command", f"--k8s-mode {mode} needs the training command that mpirun "
                                    "starts on every worker",
                                    "pass it, e.g. --k8s-command 'python train.py'"))
    if mode == "trainjob":
        if runtime is None:
            problems.append(Problem("runtime", "--k8s-mode trainjob references a ClusterTrainingRuntime, "
                                    "and none was named", "pass the name of one with an MPI mlPolicy, e.g. "
                                    "--k8s-runtime horovod-distributed (docs/kubernetes.md shows one)"))
        elif not isinstance(runtime, str) or not _DNS_1123_SUBDOMAIN.match(runtime) \
                or len(runtime) > CRD_LIMITS["TrainJob", "spec.runtimeRef.name", "maxLength"]:
            problems.append(Problem("runtime", f"{shown(runtime)} is not a valid Kubernetes object name",
                                    "use lower-case letters, digits, '-' and '.', at most "
                                    f"{CRD_LIMITS['TrainJob', 'spec.runtimeRef.name', 'maxLength']} characters"))
        problems += _trainjob_limits(image, command)
    elif runtime is not None and mode in K8S_MODES:
        problems.append(Problem("runtime", f"a runtime ({shown(runtime)}) is only used by --k8s-mode "
                                f"trainjob, not {mode}", "drop it, or use --k8s-mode trainjob"))
    return problems


def _trainjob_limits(image: Any, command: list[str]) -> list[Problem]:
    """What the Trainer CRD (:data:`CRD_LIMITS`) refuses in the image and command a TrainJob is given."""
    problems = []
    longest = CRD_LIMITS["TrainJob", "spec.trainer.image", "maxLength"]
    if isinstance(image, str) and len(image) > longest:
        problems.append(Problem("image", f"{shown(image)} is longer than the {longest} characters a TrainJob's "
                                "image may have (the Trainer CRD's spec.trainer.image maxLength)",
                                f"use an image reference of at most {longest} characters, e.g. "
                                "'registry.example/train:1.0'"))
    items = len(mpirun_command(1, 1, command))
    most = CRD_LIMITS["TrainJob", "spec.trainer.command", "maxItems"]
    if items > most:
        added = items - len(command)
        problems.append(Problem("command", f"has {len(command)} words, and with the {added} of mpirun the "
                                f"TrainJob's command has {items}, above the {most} the Trainer CRD allows "
                                "(spec.trainer.command maxItems)",
                                f"use at most {most - added} words: move the arguments into a script or a "
                                "config file that the command reads"))
    widest = CRD_LIMITS["TrainJob", "spec.trainer.command[]", "maxLength"]
    wide = [i for i, word in enumerate(command) if isinstance(word, str) and len(word) > widest]
    if wide:
        problems.append(Problem("command", f"word {wide[0] + 1} is {len(command[wide[0]]):,} characters long, "
                                f"above the {widest:,} the Trainer CRD allows in one item of a TrainJob's "
                                "command (spec.trainer.command[] maxLength)",
                                "pass the long value in a file the command reads"))
    return problems


def _pod_names(spec: ClusterSpec, name: str, mode: Any) -> list[str]:
    """The longest names the operator or we derive from `name` (Services, Pods, hostnames)."""
    workers = len(spec.addresses("worker"))
    if mode == "mpijob":  # the operator's <name>-launcher and <name>-worker-<i>
        return [f"{name}-launcher", *([f"{name}-worker-{workers - 1}"] if workers else [])]
    if mode == "trainjob":  # JobSet's hostnames <name>-<replicatedJob>-<job>-<pod>
        return [f"{name}-launcher-0-0", *([f"{name}-node-0-{workers - 1}"] if workers else [])]
    return [f"{name}-{t}-{len(spec.addresses(t)) - 1}" for t in TASK_TYPES if spec.addresses(t)]


def _named(mode: Any) -> str:
    return "Pod names" if mode in HOROVOD_MODES else "Service names"


def _container(container_name: str, image: str, command: list[str], port: int | None = None,
               port_name: str = "", resources: dict[str, Any] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": container_name, "image": image}
    if command:
        container["command"] = list(command)  # each its own list: shared ones come out as YAML aliases
    if port is not None:
        container["ports"] = [{"name": port_name, "containerPort": port}]
    if resources:
        container["resources"] = resources
    return container


def _task_resources(resources: TaskResources, task_type: str) -> dict[str, Any]:
    """A parameter server holds variables, not computations: CPU and memory, no GPUs."""
    if task_type == "ps":
        return TaskResources(cpu=resources.cpu, memory=resources.memory).requirements()
    return resources.requirements()


def _tfjob(spec: ClusterSpec, image: str, command: list[str], name: str,
           resources: TaskResources) -> dict[str, Any]:
    replicas = {}
    for task_type in TASK_TYPES:
        addresses = spec.addresses(task_type)
        if addresses:
            container = _container(TFJOB_CONTAINER, image, command, addresses[0].port, TFJOB_PORT_NAME,
                                   _task_resources(resources, task_type))
            replicas[_REPLICA_TYPES[task_type]] = {
                "replicas": len(addresses),
                "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [container]}},
            }
    return {"apiVersion": TFJOB_API_VERSION, "kind": "TFJob", "metadata": {"name": name},
            "spec": {"tfReplicaSpecs": replicas}}


def _plain(spec: ClusterSpec, image: str, command: list[str], name: str,
           resources: TaskResources) -> list[dict[str, Any]]:
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
        container = _container(TFJOB_CONTAINER, image, command, address.port, "grpc")
        config = tf_config_for(services, task_type, index)
        container["env"] = [{"name": TF_CONFIG_ENV, "value": compact_json(config)}]
        requirements = _task_resources(resources, task_type)
        if requirements:
            container["resources"] = requirements
        docs.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": address.host, "labels": dict(labels)},
                     "spec": {"restartPolicy": "OnFailure", "containers": [container]}})
    return docs


def _mpijob(spec: ClusterSpec, image: str, command: list[str], name: str,
            resources: TaskResources) -> dict[str, Any]:
    workers = len(spec.addresses("worker"))
    launcher = _container(MPI_LAUNCHER_CONTAINER, image, mpirun_command(workers, resources.slots, command))
    worker = _container(MPI_WORKER_CONTAINER, image, [], resources=resources.requirements())
    return {
        "apiVersion": MPIJOB_API_VERSION, "kind": "MPIJob", "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": resources.slots,
            "mpiImplementation": "OpenMPI",
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
                "Worker": {"replicas": workers, "template": {"spec": {"containers": [worker]}}},
            },
        },
    }


def _trainjob(spec: ClusterSpec, image: str, command: list[str], name: str, resources: TaskResources,
              runtime: str) -> dict[str, Any]:
    workers = len(spec.addresses("worker"))
    trainer: dict[str, Any] = {"image": image, "command": mpirun_command(workers, resources.slots, command),
                               "numNodes": workers, "numProcPerNode": resources.slots}
    requirements = resources.requirements()
    if requirements:
        trainer["resourcesPerNode"] = requirements
    return {"apiVersion": TRAINJOB_API_VERSION, "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                    "name": runtime},
                     "trainer": trainer}}

