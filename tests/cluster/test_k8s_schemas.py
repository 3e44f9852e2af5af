"""Every manifest ``tf-config --format k8s`` writes, in every mode, validated as an API server would:
the operators' CRD schemas (vendored in tests/cluster/schemas/, see its README) for TFJob, MPIJob and
TrainJob, and Kubernetes' own schemas (the ``kubernetes-validate`` package, strict) for Pod, Service,
ObjectMeta, the pod templates inside the CRDs and their resource requirements.

What a schema cannot say and the API server still checks is checked here too, each rule named:
unknown fields (``kubectl apply`` validates strictly, so a CRD's structural schema refuses them),
the CRDs' CEL rules (``x-kubernetes-validations``; transition rules, which need an old object, do not
apply on create), object, container and port names, and resource quantities. No cluster is run.
"""
from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from referencing import Registry, Resource

import kubernetes_validate
from support import examples
from tfdist.cli.main import cli
from tfdist.cluster.errors import ClusterConfigError
from tfdist.cluster.k8s import (
    CRD_LIMITS,
    DNS_1035_LABEL,
    K8S_MODES,
    MAX_NAME_LENGTH,
    TaskResources,
    k8s_manifests,
    parse_cpu,
    parse_memory,
    render_k8s,
)
from tfdist.cluster.spec import Address, ClusterSpec
from tfdist.errors import ArgumentValueError

SCHEMAS = Path(__file__).parent / "schemas"
#: The Kubernetes version whose schemas core objects are validated against (kubernetes-validate ships it).
KUBERNETES_VERSION = "1.33.0"
#: (apiVersion, kind) -> the vendored CRD file that defines it.
CRDS = {
    ("kubeflow.org/v1", "TFJob"): "kubeflow.org_tfjobs.yaml",
    ("kubeflow.org/v2beta1", "MPIJob"): "kubeflow.org_mpijobs.yaml",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainer.kubeflow.org_trainjobs.yaml",
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"): "trainer.kubeflow.org_clustertrainingruntimes.yaml",
}
#: Where each CRD embeds core objects: (path with ``*`` for any key, Kubernetes schema file).
EMBEDDED = {
    "TFJob": [("spec.tfReplicaSpecs.*.template", "podtemplatespec-v1.json")],
    "MPIJob": [("spec.mpiReplicaSpecs.*.template", "podtemplatespec-v1.json")],
    "TrainJob": [("spec.trainer.resourcesPerNode", "resourcerequirements-v1.json")],
    "ClusterTrainingRuntime": [("spec.template.spec.replicatedJobs.*.template", "jobtemplatespec-batch-v1.json")],
}
_DNS_1035 = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS_1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
#: The CEL rules this validator evaluates on create, by their text in the CRD.
CEL_RULES: dict[str, Callable[[Any], bool]] = {
    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')":
        lambda self: re.fullmatch(_DNS_1035, self["metadata"]["name"]) is not None,
    "size(self.metadata.name) <= 63": lambda self: len(self["metadata"]["name"]) <= 63,
    "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)].filter(x, x).size() <= 1":
        lambda self: sum(key in self for key in ("torch", "mpi", "jax", "xgboost", "flux")) <= 1,
    "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && "
    "self.replicatedJobs.exists(x, has(x.dependsOn)))":
        lambda self: not ("startupPolicy" in self and self["startupPolicy"].get("startupPolicyOrder") == "InOrder"
                          and any("dependsOn" in job for job in self.get("replicatedJobs", ()))),
}
#: k8s.io/apimachinery's quantity grammar: a signed number, then a binary or decimal SI suffix or an exponent;
#: its digits are ASCII (Python's \\d would take any script's).
_QUANTITY = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?\Z")
_NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "storage")


# --- the validator -------------------------------------------------------------------------------------------

def _core_dir() -> Path:
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    return root / f"v{KUBERNETES_VERSION}-local-strict"


@lru_cache(maxsize=None)
def _core_registry() -> Registry:
    definitions = json.loads((_core_dir() / "_definitions.json").read_text())
    return Resource.from_contents(definitions) @ Registry()


@lru_cache(maxsize=None)
def _core_validator(file: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((_core_dir() / file).read_text())
    registry = Resource.from_contents(schema) @ _core_registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _structural_to_strict(node: Any) -> Any:
    """A CRD's structural schema as the JSON Schema an API server enforces under strict field
    validation: an object with ``properties`` refuses other fields unless it preserves unknown ones;
    ``nullable`` admits null."""
    if isinstance(node, list):
        return [_structural_to_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _structural_to_strict(value) for key, value in node.items()}
    if "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


@lru_cache(maxsize=None)
def crd(api_version: str, kind: str) -> dict[str, Any]:
    """The vendored CRD's openAPIV3Schema for `api_version` (raw, as published)."""
    document = yaml.load((SCHEMAS / CRDS[api_version, kind]).read_text(), Loader=yaml.CSafeLoader)
    group, _, version = api_version.rpartition("/")
    assert document["spec"]["group"] == group and document["spec"]["names"]["kind"] == kind
    (served,) = [v for v in document["spec"]["versions"] if v["name"] == version]
    assert served["served"], f"{kind} {api_version} is not served by the vendored CRD"
    return served["schema"]["openAPIV3Schema"]


@lru_cache(maxsize=None)
def _crd_validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator:
    schema = _structural_to_strict(crd(api_version, kind))
    # the API server validates a custom object's metadata as any object's: Kubernetes' ObjectMeta
    schema["properties"]["metadata"] = {
        "$ref": "https://kubernetes.io/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    return jsonschema.Draft202012Validator(schema, registry=_core_registry())


def _errors(validator: jsonschema.Draft202012Validator, value: Any, prefix: str = "") -> list[str]:
    found = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path))):
        path = ".".join(str(p) for p in error.absolute_path)
        found.append(f"{prefix}{'.' if prefix and path else ''}{path}: {error.message}")
    return found


def _at(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """The values at a dotted `path` of `value`, ``*`` matching every key of a map or item of a list."""
    head, _, rest = path.partition(".")
    if head == "*" and isinstance(value, list):
        value = {str(index): item for index, item in enumerate(value)}
    keys = list(value) if head == "*" and isinstance(value, dict) else [head]
    for key in keys:
        if isinstance(value, dict) and key in value:
            if rest:
                yield from ((f"{key}.{p}", v) for p, v in _at(value[key], rest))
            else:
                yield key, value[key]


def _walk(schema: dict[str, Any], value: Any, path: str) -> Iterator[tuple[dict[str, Any], Any, str]]:
    """Each (schema node, value, path) the instance reaches in a structural schema."""
    yield schema, value, path
    if isinstance(value, dict):
        for key, item in value.items():
            child = schema.get("properties", {}).get(key)
            if child is None and isinstance(schema.get("additionalProperties"), dict):
                child = schema["additionalProperties"]
            if child is not None:
                yield from _walk(child, item, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from _walk(schema["items"], item, f"{path}[{index}]")


def _cel_errors(api_version: str, kind: str, doc: dict[str, Any]) -> list[str]:
    found = []
    for node, value, path in _walk(crd(api_version, kind), doc, ""):
        for rule in node.get("x-kubernetes-validations", ()):
            text = rule["rule"]
            if "oldSelf" in text:  # a transition rule: only on update
                continue
            if text not in CEL_RULES:
                found.append(f"{path or '<root>'}: CEL rule {text!r} is not evaluated by this validator")
            elif not CEL_RULES[text](value):
                found.append(f"{path or '<root>'}: {rule.get('message', text)}")
    return found


def _name_errors(doc: dict[str, Any]) -> list[str]:
    """Names the API server checks beyond the schema: the object's, containers', ports'."""
    found = []
    name = doc.get("metadata", {}).get("name", "")
    pattern = _DNS_1035 if doc["kind"] in ("Service", "TFJob", "MPIJob", "TrainJob") else _DNS_1123_LABEL
    if not isinstance(name, str) or not re.fullmatch(pattern, name) or len(name) > 63:
        found.append(f"metadata.name: {name!r} is not a valid {doc['kind']} name")
    for path, container in _containers(doc):
        if not re.fullmatch(_DNS_1123_LABEL, str(container.get("name", ""))):
            found.append(f"{path}.name: {container.get('name')!r} is not a DNS-1123 label")
        for port in container.get("ports", ()):
            port_name = str(port.get("name", ""))
            if port_name and (len(port_name) > 15 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", port_name)
                              or not re.search("[a-z]", port_name)):
                found.append(f"{path}.ports: {port_name!r} is not an IANA service name")
    return found


def _containers(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    specs = [("spec", doc.get("spec", {}))] if doc["kind"] == "Pod" else []
    for kind, embedded in EMBEDDED.items():
        if doc["kind"] == kind:
            for path, file in embedded:
                if file == "podtemplatespec-v1.json":
                    specs += [(f"{p}.spec", t.get("spec", {})) for p, t in _at(doc, path)]
    for path, spec in specs:
        for index, container in enumerate(spec.get("containers", ()) if isinstance(spec, dict) else ()):
            if isinstance(container, dict):
                yield f"{path}.containers[{index}]", container


def _quantity_errors(doc: Any, path: str = "") -> list[str]:
    """apimachinery's ParseQuantity on every request and limit; extended resources (``nvidia.com/gpu``)
    are whole numbers, and a request of one needs an equal limit."""
    found = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            here = f"{path}.{key}" if path else key
            if key in ("resources", "resourcesPerNode") and isinstance(value, dict):
                limits, requests = value.get("limits") or {}, value.get("requests") or {}
                for part, amounts in (("limits", limits), ("requests", requests)):
                    for resource, amount in amounts.items() if isinstance(amounts, dict) else ():
                        text = str(amount)
                        where = f"{here}.{part}.{resource}"
                        if not _QUANTITY.match(text) or text.startswith("-"):
                            found.append(f"{where}: {amount!r} is not a non-negative quantity")
                        elif resource not in _NATIVE_RESOURCES and not re.fullmatch(r"[0-9]+", text):
                            found.append(f"{where}: {amount!r}: an extended resource must be a whole number")
                for resource in requests if isinstance(requests, dict) else ():
                    if resource not in _NATIVE_RESOURCES and str(limits.get(resource)) != str(requests[resource]):
                        found.append(f"{here}.requests.{resource}: an extended resource's request must equal "
                                     "its limit")
            found += _quantity_errors(value, here)
    elif isinstance(doc, list):
        for index, item in enumerate(doc):
            found += _quantity_errors(item, f"{path}[{index}]")
    return found


def problems(doc: dict[str, Any]) -> list[str]:
    """Every reason an API server (with the operators' CRDs installed) would refuse `doc`."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in CRDS:
        found = _errors(_crd_validator(*key), doc)
        found += _cel_errors(*key, doc)
        for path, file in EMBEDDED[doc["kind"]]:
            for where, value in _at(doc, path):
                found += _errors(_core_validator(file), value, prefix=where)
    elif key == ("v1", "Pod"):
        found = _errors(_core_validator("pod-v1.json"), doc)
    elif key == ("v1", "Service"):
        found = _errors(_core_validator("service-v1.json"), doc)
    else:
        return [f"no schema for {key}: this validator knows {sorted(CRDS)} and v1 Pod, Service"]
    return found + _name_errors(doc) + _quantity_errors(doc)


# --- every mode's manifests are accepted -----------------------------------------------------------------------

PS_CLUSTER = ClusterSpec(chief=[Address("h1", 2222)], worker=[Address("h2", 2222), Address("h3", 2222)],
                         ps=[Address("h3", 2223)], evaluator=[Address("h1", 2223)])
WORKERS = ClusterSpec(worker=[Address(f"h{i}", 2222) for i in range(3)])
ONE_WORKER = ClusterSpec(worker=[Address("h", 2222)])
RESOURCES = [TaskResources(), TaskResources(gpus=2, cpu="4", memory="16Gi"),
             TaskResources(gpus=1), TaskResources(cpu="500m", memory="1.5Gi")]


def _cases() -> Iterator[Any]:
    for mode in K8S_MODES:
        clusters = [WORKERS, ONE_WORKER] if mode in ("mpijob", "trainjob") else [PS_CLUSTER, WORKERS]
        for spec in clusters:
            for resources in RESOURCES:
                runtime = "horovod-distributed" if mode == "trainjob" else None
                yield pytest.param(spec, mode, resources, runtime,
                                   id=f"{mode}-{len(spec.tasks())}tasks-{resources.gpus}gpu-{resources.cpu}")


@pytest.mark.parametrize("spec, mode, resources, runtime", list(_cases()))
def test_every_manifest_of_every_mode_is_accepted(spec, mode, resources, runtime):
    text = render_k8s(spec, "registry.example/train:1.0", ["python", "train.py", "--epochs", "3"],
                      name="mnist-run", mode=mode, resources=resources, runtime=runtime)
    docs = list(yaml.safe_load_all(text))
    assert docs == k8s_manifests(spec, "registry.example/train:1.0", ["python", "train.py", "--epochs", "3"],
                                 name="mnist-run", mode=mode, resources=resources, runtime=runtime)
    kinds = {d["kind"] for d in docs}
    assert kinds == {"tfjob": {"TFJob"}, "plain": {"Pod", "Service"}, "mpijob": {"MPIJob"},
                     "trainjob": {"TrainJob"}}[mode]
    for doc in docs:
        assert problems(doc) == [], (doc["kind"], doc["metadata"]["name"])


@pytest.mark.parametrize("mode, extra", [
    ("tfjob", []), ("plain", []), ("mpijob", ["--gpus-per-task", "4"]),
    ("trainjob", ["--k8s-runtime", "horovod-distributed", "--cpu-per-task", "8", "--memory-per-task", "32Gi"]),
])
def test_the_commands_output_is_accepted(mode, extra):
    cluster = ["--workers", "2", "--hosts", "n1,n2"]
    if mode in ("tfjob", "plain"):
        cluster += ["--ps-count", "1", "--with-chief"]
    result = CliRunner().invoke(cli, ["tf-config", *cluster, "--format", "k8s", "--k8s-image", "img:1",
                                      "--k8s-mode", mode, "--k8s-command", "python train.py", *extra])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert docs and all(problems(doc) == [] for doc in docs)


# --- the validation can fail -------------------------------------------------------------------------------------

def _one(mode: str, spec: ClusterSpec = WORKERS, **kwargs: Any) -> dict[str, Any]:
    if mode == "trainjob":
        kwargs.setdefault("runtime", "horovod-distributed")
    docs = k8s_manifests(spec, "img:1", ["python", "train.py"], name="job", mode=mode, **kwargs)
    return copy.deepcopy(docs[0] if mode != "plain" else [d for d in docs if d["kind"] == "Pod"][0])


def _rename(mapping: dict[str, Any], old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node: Any = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def _mutations() -> Iterator[Any]:
    def rename(path: str, old: str, new: str) -> Callable[[dict[str, Any]], None]:
        def apply(doc: dict[str, Any]) -> None:
            node: Any = doc
            for key in path.split(".") if path else ():
                node = node[int(key)] if isinstance(node, list) else node[key]
            _rename(node, old, new)
        return apply

    def put(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
        return lambda doc: _set(doc, path, value)

    cases = [
        ("tfjob", rename("spec", "tfReplicaSpecs", "tfReplicaSpec"), "spec: Additional properties"),
        ("tfjob", put("spec.tfReplicaSpecs.Worker.replicas", "3"), "spec.tfReplicaSpecs.Worker.replicas: '3' is not"),
        ("tfjob", put("spec.tfReplicaSpecs.Worker.template.spec.containers", {"name": "tensorflow"}),
         "spec.tfReplicaSpecs.Worker.template.spec.containers: {'name': 'tensorflow'} is not of type 'array'"),
        ("tfjob", rename("spec.tfReplicaSpecs.Worker.template.spec.containers.0", "image", "imagee"),
         "containers.0: Additional properties"),
        ("tfjob", put("spec.tfReplicaSpecs.Worker.template.spec.containers.0.ports.0.containerPort", "2222"),
         "containerPort: '2222' is not"),
        ("tfjob", put("metadata.name", "Job_1"), "metadata.name: 'Job_1' is not a valid TFJob name"),
        ("tfjob", put("metadata.labels", {"a": 1}), "metadata.labels.a: 1 is not"),
        ("mpijob", rename("spec", "mpiReplicaSpecs", "mpiReplicaSpec"), "spec: Additional properties"),
        ("mpijob", put("spec.mpiReplicaSpecs.Worker.replicas", "3"), "spec.mpiReplicaSpecs.Worker.replicas: '3'"),
        ("mpijob", put("spec.slotsPerWorker", "1"), "spec.slotsPerWorker: '1' is not"),
        ("mpijob", put("spec.mpiImplementation", "OpenMPII"), "spec.mpiImplementation: 'OpenMPII' is not one of"),
        ("mpijob", put("spec.mpiReplicaSpecs.Worker.template.spec.containers.0.resources",
                       {"limits": {"nvidia.com/gpu": "0.5"}}), "an extended resource must be a whole number"),
        ("mpijob", put("spec.mpiReplicaSpecs.Worker.template.spec.containers.0.resources",
                       {"requests": {"memory": "4 GB"}}), "'4 GB' is not a non-negative quantity"),
        ("mpijob", put("spec.mpiReplicaSpecs.Worker.template.spec.containers.0.resources",
                       {"requests": {"nvidia.com/gpu": 1}}), "request must equal its limit"),
        ("trainjob", rename("spec", "runtimeRef", "runtimeref"), "spec: 'runtimeRef' is a required property"),
        ("trainjob", put("spec.trainer.numNodes", "2"), "spec.trainer.numNodes: '2' is not"),
        ("trainjob", put("spec.trainer.resourcesPerNode", {"request": {"cpu": "1"}}),
         "spec.trainer.resourcesPerNode: Additional properties"),
        ("trainjob", put("metadata.name", "a" * 64), "<root>: metadata.name must be no more than 63 characters"),
        ("trainjob", put("metadata.name", "9job"), "<root>: metadata.name must match RFC 1035 DNS label format"),
        ("trainjob", put("spec.trainer.image", "a" * 501), "spec.trainer.image: 'aaaa"),
        ("trainjob", put("spec.trainer.command", ["w"] * 129), "spec.trainer.command: ['w', 'w'"),
        ("trainjob", put("spec.trainer.resourcesPerNode", {"requests": {"cpu": "٢"}}),
         "spec.trainer.resourcesPerNode.requests.cpu: '٢' does not match"),
        ("plain", put("spec.containers.0.resources", {"requests": {"memory": "１６Gi"}}),
         "'１６Gi' is not a non-negative quantity"),
        ("plain", put("spec.containers.0.env.0.value", 5), "spec.containers.0.env.0.value: 5 is not"),
        ("plain", rename("spec", "containers", "container"), "spec: 'containers' is a required property"),
        ("plain", rename("spec.containers.0", "name", "nam"), "spec.containers.0: 'name' is a required property"),
        ("plain", put("spec.containers.0.ports.0.name", "grpc-port-of-the-job"), "is not an IANA service name"),
    ]
    for mode, mutate, expected in cases:
        yield pytest.param(mode, mutate, expected, id=f"{mode}-{expected[:40]}")


@pytest.mark.parametrize("mode, mutate, expected", list(_mutations()))
def test_a_wrong_field_is_rejected(mode, mutate, expected):
    doc = _one(mode, resources=TaskResources(gpus=1, cpu="1", memory="1Gi"))
    assert problems(doc) == []
    mutate(doc)
    found = problems(doc)
    assert any(expected in line for line in found), found


def test_a_service_with_a_wrong_field_is_rejected():
    (service, *_) = [d for d in k8s_manifests(PS_CLUSTER, "img", mode="plain") if d["kind"] == "Service"]
    assert problems(service) == []
    service["spec"]["ports"][0]["port"] = "2222"
    service["spec"]["clusterIp"] = "None"
    found = problems(service)
    assert any("spec.ports.0.port: '2222' is not" in line for line in found), found
    assert any("spec: Additional properties are not allowed ('clusterIp' was unexpected)" in line
               for line in found), found


def test_an_unknown_cel_rule_or_kind_fails_rather_than_passes(monkeypatch):
    doc = _one("trainjob")
    for rule in list(CEL_RULES):
        monkeypatch.delitem(CEL_RULES, rule)
    found = problems(doc)
    assert any("<root>: CEL rule \"self.metadata.name.matches(" in line
               and "is not evaluated by this validator" in line for line in found), found
    (unknown,) = problems({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}})
    assert unknown.startswith("no schema for ('batch/v1', 'Job'): this validator knows [")


# --- the runtime docs/kubernetes.md shows for --k8s-mode trainjob ----------------------------------------------

def _docs_runtime() -> dict[str, Any]:
    page = (Path(__file__).parents[2] / "docs" / "kubernetes.md").read_text()
    (block,) = [b for b in re.findall(r"^```yaml\n(.*?)^```", page, flags=re.S | re.M)
                if b.startswith("# horovod-runtime.yaml\n")]
    return yaml.safe_load(block)


def test_the_runtime_the_docs_show_is_accepted_and_fits_the_trainjob():
    runtime = _docs_runtime()
    assert problems(runtime) == []
    assert runtime["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] == "OpenMPI"
    (job,) = k8s_manifests(WORKERS, "registry/horovod-train:1.0", ["python", "train.py"], mode="trainjob",
                           runtime=runtime["metadata"]["name"])
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": runtime["kind"],
                                         "name": "horovod-distributed"}
    images = {c["image"] for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]
              for c in j["template"]["spec"]["template"]["spec"]["containers"]}
    assert images == {job["spec"]["trainer"]["image"]}


def test_a_runtime_with_two_ml_policies_or_a_wrong_job_field_is_rejected():
    runtime = _docs_runtime()
    runtime["spec"]["mlPolicy"]["torch"] = {}
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimits"] = 1
    found = problems(runtime)
    assert "spec.mlPolicy: Only one of the policy can be configured" in found, found
    assert any("replicatedJobs.0.template.spec: Additional properties are not allowed ('backoffLimits'" in line
               for line in found), found


# --- issue 34: the renderer checks the limits the vendored schemas set, and they cannot drift -------------------

#: Schema keywords that limit a string's or a list's length or form.
LIMIT_KEYWORDS = ("maxLength", "minLength", "maxItems", "pattern")
#: Limits on fields tfdist fills with constants, not options: the constant is checked against the limit.
FIXED_FIELDS = {("TrainJob", "spec.runtimeRef.apiGroup"), ("TrainJob", "spec.runtimeRef.kind")}
#: The resource quantities (requests and limits of every container and of the TrainJob's nodes), whose
#: pattern parse_cpu / parse_memory check more strictly (the property test below), so the renderer never
#: writes a quantity the pattern refuses.
QUANTITY_FIELD = re.compile(r".*\.(resources|resourcesPerNode)\.(requests|limits)\.\*")


def _schema_node(kind: str, path: str) -> dict[str, Any]:
    """The CRD schema node of a dotted field path (``command[]``: the items of ``command``)."""
    api_version = {"TFJob": "kubeflow.org/v1", "MPIJob": "kubeflow.org/v2beta1",
                   "TrainJob": "trainer.kubeflow.org/v1alpha1"}[kind]
    node = crd(api_version, kind)
    for part in path.split("."):
        items = part.endswith("[]")
        node = node["additionalProperties"] if part == "*" else node["properties"][part.removesuffix("[]")]
        if items:
            node = node["items"]
    return node


def _limits(schema: dict[str, Any], value: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(field path, keyword, limit) of every length, count or pattern limit that `value` reaches in a raw
    CRD schema; list items are ``[]`` and map values ``*`` in the path."""
    for keyword in LIMIT_KEYWORDS:
        if keyword in schema:
            yield path, keyword, schema[keyword]
    if isinstance(value, dict):
        for key, item in value.items():
            child, name = schema.get("properties", {}).get(key), key
            if child is None and isinstance(schema.get("additionalProperties"), dict):
                child, name = schema["additionalProperties"], "*"
            if child is not None:
                yield from _limits(child, item, f"{path}.{name}" if path else name)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            yield from _limits(schema["items"], item, path + "[]")


def test_every_limit_the_renderer_checks_is_the_vendored_schemas():
    """CRD_LIMITS (what k8s.py checks before writing) read back from the vendored CRDs: equal."""
    assert CRD_LIMITS
    for (kind, path, keyword), limit in CRD_LIMITS.items():
        assert _schema_node(kind, path)[keyword] == limit, (kind, path, keyword)


def test_every_limit_on_a_field_the_renderer_writes_is_checked_by_it():
    """The other way: walk the richest manifest of each CRD mode through its schema; every length, count or
    pattern limit it reaches is in CRD_LIMITS, on a constant that fits, or the quantity pattern. A new
    limit in a newer vendored CRD fails here until the renderer checks it."""
    resources = TaskResources(gpus=2, cpu="4", memory="16Gi")
    reached = set()
    for mode, spec in (("tfjob", PS_CLUSTER), ("mpijob", WORKERS), ("trainjob", WORKERS)):
        (doc,) = k8s_manifests(spec, "img:1", ["python", "train.py"], name="job", mode=mode, resources=resources,
                               runtime="horovod-distributed" if mode == "trainjob" else None)
        for path, keyword, limit in _limits(crd(doc["apiVersion"], doc["kind"]), doc):
            reached.add((doc["kind"], path, keyword))
            if (doc["kind"], path) in FIXED_FIELDS:
                (value,) = [v for p, v in _at(doc, path)]
                assert keyword == "maxLength" and len(value) <= limit, (path, value)
            elif QUANTITY_FIELD.fullmatch(path):
                assert keyword == "pattern" and limit == _QUANTITY_PATTERN, path
            else:
                assert (doc["kind"], path, keyword) in CRD_LIMITS, f"{doc['kind']} {path} {keyword} {limit!r} is " \
                    "not checked by the renderer: add it to CRD_LIMITS and check it in k8s.py"
    assert set(CRD_LIMITS) <= reached  # nothing in the table that no manifest reaches


def test_the_renderers_name_rule_is_the_trainjob_crds():
    """metadata.name: the TrainJob CRD's CEL rules hold the pattern and the length the renderer checks."""
    rules = [rule["rule"] for rule in crd("trainer.kubeflow.org/v1alpha1", "TrainJob")["x-kubernetes-validations"]]
    (pattern,) = [m for r in rules for m in re.findall(r"self\.metadata\.name\.matches\('(.*)'\)", r)]
    (size,) = [int(m) for r in rules for m in re.findall(r"size\(self\.metadata\.name\) <= (\d+)", r)]
    assert (pattern, size) == (f"^{DNS_1035_LABEL}$", MAX_NAME_LENGTH)


_QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)"
                     r"|(\.[0-9]+))))?$")
QUANTITY_LIKE = st.text(st.one_of(st.sampled_from("0123456789.mkMGTPEin +-"), st.characters(categories=["Nd"]),
                                  st.characters(categories=["Zs"]), st.sampled_from("１６Ｇｉ")), max_size=8)


def test_the_quantity_pattern_is_the_crds():
    assert _schema_node("TrainJob", "spec.trainer.resourcesPerNode.requests.*")["pattern"] == _QUANTITY_PATTERN


@settings(max_examples=examples(500), deadline=None)
@given(QUANTITY_LIKE)
def test_every_quantity_the_renderer_accepts_matches_the_crds_pattern(text):
    """What parse_cpu / parse_memory accept, the CRD's quantity pattern accepts (ASCII digits only)."""
    for parse in (parse_cpu, parse_memory):
        try:
            value = parse(text)
        except ArgumentValueError as exc:
            assert "; fix: " in str(exc)
        else:
            assert value.isascii() and re.fullmatch(_QUANTITY_PATTERN, value), (parse.__name__, text)


def _mostly(valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`valid` nine times in ten, so that each mode's manifests are written often enough to check (7 fields:
    about half the cases are written); the hostile values are refused, each naming its field."""
    return st.sampled_from([True] * 9 + [False]).flatmap(lambda keep: valid if keep else hostile)


@st.composite
def _renderer_arguments(draw: st.DrawFn) -> dict[str, Any]:
    mode = draw(st.sampled_from(K8S_MODES))
    horovod = mode in ("mpijob", "trainjob")
    long_image = st.integers(490, 510).map(lambda n: "registry.example/" + "a" * (n - 17))
    return {
        "spec": draw(_mostly(st.sampled_from([WORKERS, ONE_WORKER] if horovod else [PS_CLUSTER, WORKERS]),
                             st.sampled_from([PS_CLUSTER, WORKERS, ONE_WORKER]))),
        "image": draw(_mostly(st.one_of(st.sampled_from(["img:1", "registry.example/train@sha256:" + "0" * 64]),
                                        long_image),
                              st.one_of(st.sampled_from([" img", "img\n", ""]), st.text(max_size=30)))),
        "command": draw(_mostly(st.one_of(st.lists(st.text(max_size=12), min_size=1, max_size=6),
                                          st.integers(100, 115).map(lambda n: ["w"] * n)),
                                st.just([]))),
        "name": draw(_mostly(st.from_regex(r"[a-z][a-z0-9]{0,20}", fullmatch=True),
                             st.one_of(st.sampled_from(["Bad", "9x", "a" * 60]),
                                       st.from_regex(r"[a-z][-a-z0-9]{0,70}", fullmatch=True)))),
        "mode": mode,
        "cpu": draw(_mostly(st.one_of(st.none(), st.sampled_from(["2", "500m", ".5"])), QUANTITY_LIKE)),
        "memory": draw(_mostly(st.one_of(st.none(), st.sampled_from(["16Gi", "1.5Gi", "512M"])), QUANTITY_LIKE)),
        "gpus": draw(st.integers(0, 3)),
        "runtime": draw(_mostly(st.sampled_from(["horovod-distributed", "r" * 253]),
                                st.sampled_from([None, "r" * 254, "Bad"]))
                        if mode == "trainjob" else _mostly(st.none(), st.just("rt"))),
    }


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_renderer_arguments())
def test_every_manifest_the_renderer_accepts_is_valid_against_the_schemas(args):
    """A fuzzer (issue 34): the renderer refuses (every problem naming a field with a fix), or each manifest
    it writes is one the API server takes, the CRD and core schemas, CEL rules, names and quantities."""
    try:
        resources = TaskResources(gpus=args["gpus"], cpu=args["cpu"], memory=args["memory"])
        docs = k8s_manifests(args["spec"], args["image"], args["command"], args["name"], args["mode"],
                             resources=resources, runtime=args["runtime"])
    except ClusterConfigError as exc:
        event(f"refused: {' '.join(sorted({p.field for p in exc.problems}))}")
        assert exc.problems and all(p.fix for p in exc.problems)
        assert {p.field for p in exc.problems} <= {"image", "command", "name", "mode", "runtime", "cpu", "memory",
                                                   "gpus"}
        return
    event(f"accepted {args['mode']}")
    for doc in docs:
        assert problems(doc) == [], (doc["kind"], problems(doc))


# --- the vendored files are what the README says ------------------------------------------------------------------

def test_the_vendored_schemas_match_their_readme():
    readme = (SCHEMAS / "README.md").read_text()
    listed = dict(re.findall(r"`([\w.]+\.yaml)`.*?sha256 `([0-9a-f]{64})`", readme, flags=re.S))
    assert sorted(listed) == sorted(CRDS.values()) == sorted(p.name for p in SCHEMAS.glob("*.yaml"))
    for name, digest in listed.items():
        assert hashlib.sha256((SCHEMAS / name).read_bytes()).hexdigest() == digest, name
    assert f"v{KUBERNETES_VERSION}" in readme and kubernetes_validate.__version__ in readme
