"""Tests of tfdist.cluster.k8s: the manifests of every mode, resources, and every refusal.

Schema validation of the same manifests is tests/cluster/test_k8s_schemas.py; the CLI,
tests/cluster/test_k8s_cli.py.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tfdist.cluster import k8s
from tfdist.cluster.errors import ClusterConfigError
from tfdist.cluster.k8s import (
    MPIRUN_FLAGS,
    TaskResources,
    k8s_manifests,
    mpirun_command,
    parse_cpu,
    parse_memory,
    render_k8s,
)
from tfdist.cluster.spec import Address, ClusterSpec
from tfdist.cluster.validate import validate_tf_config
from tfdist.errors import ArgumentValueError

SPEC = ClusterSpec(
    chief=[Address("h1", 2222)],
    worker=[Address("h2", 2222), Address("h3", 2222)],
    ps=[Address("h3", 2223)],
    evaluator=[Address("h1", 2223)],
)
WORKERS = ClusterSpec(worker=[Address("h1", 2222), Address("h2", 2222), Address("h3", 2222)])
GPUS = TaskResources(gpus=2, cpu="4", memory="16Gi")


def test_render_k8s_tfjob():
    docs = list(yaml.safe_load_all(render_k8s(SPEC, "reg/train:1", ["python", "train.py"], name="mnist")))
    assert len(docs) == 1
    job = docs[0]
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("kubeflow.org/v1", "TFJob", "mnist")
    replicas = job["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {
        "Chief": 1,
        "Worker": 2,
        "PS": 1,
        "Evaluator": 1,
    }
    container = replicas["PS"]["template"]["spec"]["containers"][0]
    assert container == {
        "name": "tensorflow",
        "image": "reg/train:1",
        "command": ["python", "train.py"],
        "ports": [{"name": "tfjob-port", "containerPort": 2223}],
    }


def test_render_k8s_plain_services_and_pods():
    docs = list(yaml.safe_load_all(render_k8s(SPEC, "img", name="job", mode="plain")))
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    pods = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Pod"}
    assert sorted(services) == ["job-chief-0", "job-ps-0", "job-worker-0", "job-worker-1"]
    assert sorted(pods) == sorted([*services, "job-evaluator-0"])
    assert services["job-ps-0"]["spec"]["clusterIP"] == "None"
    assert services["job-ps-0"]["spec"]["ports"] == [{"name": "grpc", "port": 2223, "targetPort": 2223}]
    assert services["job-ps-0"]["spec"]["selector"] == pods["job-ps-0"]["metadata"]["labels"]
    for name, pod in pods.items():
        (container,) = pod["spec"]["containers"]
        assert "command" not in container
        (env,) = container["env"]
        config = json.loads(env["value"])
        assert env["name"] == "TF_CONFIG" and validate_tf_config(config) == []
        assert config["cluster"] == {
            "chief": ["job-chief-0:2222"],
            "worker": ["job-worker-0:2222", "job-worker-1:2222"],
            "ps": ["job-ps-0:2223"],
        }
        task_type, index = name[len("job-") :].rsplit("-", 1)
        assert config["task"] == {"type": task_type, "index": int(index)}


@pytest.mark.parametrize(
    "kwargs, field, text",
    [
        ({"image": ""}, "image", "no container image given"),
        ({"image": "i", "name": "Bad_Name"}, "name", "'Bad_Name' is not a valid Kubernetes name"),
        ({"image": "i", "name": "a" * 60}, "name", "makes Service names of 72 characters; the limit is 63"),
        ({"image": "i", "mode": "helm"}, "mode", "unknown Kubernetes mode 'helm'"),
    ],
)
def test_render_k8s_errors(kwargs, field, text):
    with pytest.raises(ClusterConfigError) as info:
        render_k8s(SPEC, **kwargs)
    assert info.value.problems[0].field == field and text in str(info.value)


def test_render_k8s_is_the_yaml_of_fresh_manifests():
    first = k8s_manifests(SPEC, "img", ["python", "t.py"], mode="plain")
    assert list(yaml.safe_load_all(render_k8s(SPEC, "img", ["python", "t.py"], mode="plain"))) == first
    first[0]["metadata"]["name"] = "changed"
    first[1]["spec"]["containers"][0]["env"].clear()
    assert k8s_manifests(SPEC, "img", ["python", "t.py"], mode="plain")[0]["metadata"]["name"] == "tfdist-chief-0"


@pytest.mark.parametrize("mode", ["tfjob", "plain"])
def test_the_yaml_has_no_aliases_and_containers_share_no_lists(mode):
    """The command was one list shared by every replica type: PyYAML wrote it once as an anchor
    (``command: &id001``) and then as aliases (``command: *id001``)."""
    text = render_k8s(SPEC, "img", ["python", "train.py"], mode=mode, resources=GPUS)
    assert "&id" not in text and "*id" not in text
    assert text.count("- train.py") == (4 if mode == "tfjob" else 5)
    docs = k8s_manifests(SPEC, "img", ["python", "train.py"], mode=mode)
    containers = [c for d in docs for c in _containers(d)]
    containers[0]["command"].append("--changed")
    assert [c["command"] for c in containers[1:]] == [["python", "train.py"]] * (len(containers) - 1)


def _containers(doc: dict) -> list[dict]:
    if doc["kind"] == "TFJob":
        return [r["template"]["spec"]["containers"][0] for r in doc["spec"]["tfReplicaSpecs"].values()]
    return doc["spec"]["containers"] if doc["kind"] == "Pod" else []


def test_tfjob_resources_gpus_on_computing_tasks_not_on_ps():
    (job,) = k8s_manifests(SPEC, "img", mode="tfjob", resources=GPUS)
    resources = {kind: spec["template"]["spec"]["containers"][0].get("resources")
                 for kind, spec in job["spec"]["tfReplicaSpecs"].items()}
    full = {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": 2}}
    assert resources == {"Chief": full, "Worker": full, "Evaluator": full,
                         "PS": {"requests": {"cpu": "4", "memory": "16Gi"}}}


def test_plain_pods_get_the_resources_and_services_do_not():
    docs = k8s_manifests(SPEC, "img", mode="plain", resources=TaskResources(gpus=1))
    pods = {d["metadata"]["name"]: d["spec"]["containers"][0].get("resources") for d in docs if d["kind"] == "Pod"}
    assert pods == {"tfdist-chief-0": {"limits": {"nvidia.com/gpu": 1}},
                    "tfdist-worker-0": {"limits": {"nvidia.com/gpu": 1}},
                    "tfdist-worker-1": {"limits": {"nvidia.com/gpu": 1}},
                    "tfdist-ps-0": None,
                    "tfdist-evaluator-0": {"limits": {"nvidia.com/gpu": 1}}}
    assert all("resources" not in json.dumps(d) for d in docs if d["kind"] == "Service")


def test_without_resources_no_container_has_a_resources_key():
    for mode, spec in (("tfjob", SPEC), ("plain", SPEC), ("mpijob", WORKERS)):
        assert '"resources"' not in json.dumps(k8s_manifests(spec, "img", ["python"], mode=mode)), mode
    (job,) = k8s_manifests(WORKERS, "img", ["python"], mode="trainjob", runtime="rt")
    assert "resourcesPerNode" not in job["spec"]["trainer"]


def test_mpijob_launcher_runs_mpirun_over_every_slot_and_workers_get_the_resources():
    (job,) = k8s_manifests(WORKERS, "reg/hvd:1", ["python", "train.py", "--epochs", "2"], name="mnist",
                           mode="mpijob", resources=GPUS)
    assert (job["apiVersion"], job["kind"], job["metadata"]) == ("kubeflow.org/v2beta1", "MPIJob", {"name": "mnist"})
    spec = job["spec"]
    assert (spec["slotsPerWorker"], spec["mpiImplementation"], spec["runPolicy"]) == (
        2, "OpenMPI", {"cleanPodPolicy": "Running"})
    launcher, worker = spec["mpiReplicaSpecs"]["Launcher"], spec["mpiReplicaSpecs"]["Worker"]
    assert launcher["replicas"] == 1 and worker["replicas"] == 3
    (launcher_container,) = launcher["template"]["spec"]["containers"]
    assert launcher_container == {
        "name": "mpi-launcher", "image": "reg/hvd:1",
        "command": ["mpirun", "-np", "6", *MPIRUN_FLAGS, "python", "train.py", "--epochs", "2"]}
    (worker_container,) = worker["template"]["spec"]["containers"]
    assert worker_container == {"name": "mpi-worker", "image": "reg/hvd:1",
                                "resources": {"requests": {"cpu": "4", "memory": "16Gi"},
                                              "limits": {"nvidia.com/gpu": 2}}}


def test_mpirun_flags_are_the_operators_horovod_example():
    assert mpirun_command(2, 1, ["python", "t.py"]) == [
        "mpirun", "-np", "2", "--allow-run-as-root", "-bind-to", "none", "-map-by", "slot",
        "-x", "LD_LIBRARY_PATH", "-x", "PATH", "-mca", "pml", "ob1", "-mca", "btl", "^openib", "python", "t.py"]


def test_trainjob_references_the_runtime_and_sets_nodes_slots_resources():
    (job,) = k8s_manifests(WORKERS, "reg/hvd:1", ["python", "train.py"], name="mnist", mode="trainjob",
                           resources=GPUS, runtime="horovod-distributed")
    assert (job["apiVersion"], job["kind"], job["metadata"]) == (
        "trainer.kubeflow.org/v1alpha1", "TrainJob", {"name": "mnist"})
    assert job["spec"] == {
        "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                       "name": "horovod-distributed"},
        "trainer": {"image": "reg/hvd:1", "command": ["mpirun", "-np", "6", *MPIRUN_FLAGS, "python", "train.py"],
                    "numNodes": 3, "numProcPerNode": 2,
                    "resourcesPerNode": {"requests": {"cpu": "4", "memory": "16Gi"},
                                         "limits": {"nvidia.com/gpu": 2}}},
    }


@pytest.mark.parametrize("mode", ["mpijob", "trainjob"])
@pytest.mark.parametrize("spec, named", [
    (SPEC, "this cluster has 1 chief and 1 ps and 1 evaluator"),
    (ClusterSpec(chief=[Address("a", 1)], worker=[Address("b", 1)]), "this cluster has 1 chief;"),
])
def test_horovod_modes_refuse_a_cluster_that_is_not_workers_only(mode, spec, named):
    with pytest.raises(ClusterConfigError) as info:
        k8s_manifests(spec, "img", ["python"], mode=mode, runtime="rt" if mode == "trainjob" else None)
    (problem,) = info.value.problems
    assert problem.field == "mode" and named in str(problem)
    assert f"--k8s-mode {mode} runs Horovod, whose cluster is workers only" in str(problem)
    assert str(problem).endswith("; fix: give only workers (--worker or --workers), or use --k8s-mode tfjob "
                                 "for a chief/ps cluster")


@pytest.mark.parametrize("kwargs, field, text", [
    ({"mode": "mpijob"}, "command", "--k8s-mode mpijob needs the training command"),
    ({"mode": "trainjob", "command": ["python"]}, "runtime", "references a ClusterTrainingRuntime, and none was named"),
    ({"mode": "trainjob", "command": ["python"], "runtime": "Bad_Runtime"}, "runtime",
     "'Bad_Runtime' is not a valid Kubernetes object name"),
    ({"mode": "tfjob", "runtime": "rt"}, "runtime", "a runtime ('rt') is only used by --k8s-mode trainjob, not tfjob"),
    ({"mode": "plain", "runtime": "rt"}, "runtime", "not plain; fix: drop it, or use --k8s-mode trainjob"),
    ({"mode": "mpijob", "command": ["python"], "name": "a" * 55}, "name",
     "makes Pod names of 64 characters; the limit is 63; fix: shorten the name by 1 characters"),
    ({"mode": "trainjob", "command": ["python"], "runtime": "rt", "name": "a" * 51}, "name",
     "makes Pod names of 64 characters"),
])
def test_mode_specific_refusals(kwargs, field, text):
    with pytest.raises(ClusterConfigError) as info:
        k8s_manifests(WORKERS, "img", **kwargs)
    assert [p.field for p in info.value.problems] == [field] and text in str(info.value)
    assert "; fix: " in str(info.value)


def test_a_command_given_as_one_string_is_refused_not_split_into_letters():
    with pytest.raises(ClusterConfigError) as info:
        k8s_manifests(WORKERS, "img", "python train.py")
    assert str(info.value) == ("command: 'python train.py' is one string, not a list of words; fix: split it "
                               "first, e.g. shlex.split('python train.py')")


def test_every_problem_is_listed_at_once():
    with pytest.raises(ClusterConfigError) as info:
        k8s_manifests(SPEC, "", mode="mpijob", name="X")
    assert [p.field for p in info.value.problems] == ["image", "name", "mode", "command"]


@pytest.mark.parametrize("text", ["2", "0.5", "500m", "1m", " 4 ", "16", ".5", "2."])
def test_parse_cpu_accepts(text):
    assert parse_cpu(text) == text.strip()


@pytest.mark.parametrize("text, message", [
    ("0", "cpu: '0' is below 1m, the smallest CPU request Kubernetes keeps; fix: ask for 1m or more"),
    ("0.0001", "is below 1m"),
    ("0m", "is below 1m"),
    ("-1", "'-1' is not a CPU quantity; accepted: a number of cores such as 2 or 0.5, or millicores such as 500m"),
    ("2 cores", "is not a CPU quantity"),
    ("1.5m", "is not a CPU quantity"),
    ("2k", "is not a CPU quantity"),
    ("", "is not a CPU quantity"),
    ("9" * 5000, "(5000 characters) is not a CPU quantity"),
])
def test_parse_cpu_refuses(text, message):
    with pytest.raises(ArgumentValueError) as info:
        parse_cpu(text)
    assert message in str(info.value) and "; fix: " in str(info.value)


@pytest.mark.parametrize("text", ["16Gi", "512Mi", "1G", "1073741824", "1.5Gi", "100k", "2Ti"])
def test_parse_memory_accepts(text):
    assert parse_memory(text) == text


@pytest.mark.parametrize("text, message", [
    ("512m", "memory: '512m' has the suffix 'm' (m is milli: thousandths of a byte), which Kubernetes does not "
             "read as you meant; accepted: bytes, or a number with Ki, Mi, Gi, Ti (powers of 1024) or k, M, G, T; "
             "fix: use 512Mi"),
    ("4gb", "fix: use 4G"),
    ("4GB", "fix: use 4G"),
    ("2gi", "fix: use 2Gi"),
    ("0", "asks for no memory"),
    ("0Gi", "asks for no memory"),
    ("1.5", "is a fraction of a byte; fix: give whole bytes or a suffix, e.g. 1.5Gi"),
    ("lots", "'lots' is not a memory quantity"),
    ("-1Gi", "is not a memory quantity"),
    ("1e9", "is not a memory quantity"),
    ("9" * 5000, "(5000 characters) is too long for a memory quantity"),
])
def test_parse_memory_refuses(text, message):
    with pytest.raises(ArgumentValueError) as info:
        parse_memory(text)
    assert message in str(info.value) and "; fix: " in str(info.value)


@pytest.mark.parametrize("kwargs, fields", [
    ({"gpus": -1}, ["gpus"]), ({"gpus": k8s.MAX_GPUS_PER_TASK + 1}, ["gpus"]), ({"gpus": True}, ["gpus"]),
    ({"gpus": 1.0}, ["gpus"]), ({"cpu": "x", "memory": "512m"}, ["cpu", "memory"]),
])
def test_task_resources_refuse_bad_values(kwargs, fields):
    with pytest.raises(ClusterConfigError) as info:
        TaskResources(**kwargs)
    assert [p.field for p in info.value.problems] == fields
    assert all(p.fix for p in info.value.problems)


def test_task_resources_slots_and_requirements():
    assert TaskResources().requirements() == {} and TaskResources().slots == 1
    assert TaskResources(gpus=4).slots == 4
    assert TaskResources(cpu=" 2 ").cpu == "2"


# --- issue 34: quantities outside ASCII, the Trainer CRD's limits ------------------------------------------

@pytest.mark.parametrize("parse, text, char, spelling", [
    (parse_cpu, "٢", "'٢' (U+0662 ARABIC-INDIC DIGIT TWO)", "'2'"),
    (parse_cpu, "５００m", "'５' (U+FF15 FULLWIDTH DIGIT FIVE)", "'500m'"),
    (parse_cpu, "2\u00a0", "'\\xa0' (U+00A0 NO-BREAK SPACE)", "'2'"),
    (parse_memory, "１６Gi", "'１' (U+FF11 FULLWIDTH DIGIT ONE)", "'16Gi'"),
    (parse_memory, "16Ｇi", "'Ｇ' (U+FF27 FULLWIDTH LATIN CAPITAL LETTER G)", "'16Gi'"),
    (parse_memory, "४Gi", "'४' (U+096A DEVANAGARI DIGIT FOUR)", "'4Gi'"),
])
def test_quantities_outside_ascii_are_refused_with_their_ascii_spelling(parse, text, char, spelling):
    """`--cpu-per-task ٢` was written into the YAML as is (the regex's \\d takes any script's digits), and
    the API server refuses such a quantity."""
    with pytest.raises(ArgumentValueError) as info:
        parse(text, field="cpu")
    assert str(info.value) == (f"cpu: {text!r} holds {char}, which is not ASCII; numbers are read in ASCII "
                               f"only, as Kubernetes reads them; fix: type it as {spelling}")


def test_quantities_outside_ascii_without_an_ascii_spelling_give_an_example():
    with pytest.raises(ArgumentValueError) as info:
        parse_memory("2²Gi", field="")
    assert str(info.value).endswith("; fix: type it with the ASCII digits 0-9, e.g. 4Gi or 512Mi")
    with pytest.raises(ClusterConfigError) as caught:
        TaskResources(cpu="٢", memory="１６Gi")
    assert [p.field for p in caught.value.problems] == ["cpu", "memory"]


def test_a_trainjob_image_longer_than_the_crd_allows_is_refused():
    """The vendored Trainer CRD says spec.trainer.image maxLength 500; a 501-character image was written."""
    runtime = "horovod-distributed"
    (job,) = k8s_manifests(WORKERS, "r/" + "a" * 498, ["python"], mode="trainjob", runtime=runtime)
    assert len(job["spec"]["trainer"]["image"]) == 500
    with pytest.raises(ClusterConfigError) as info:
        k8s_manifests(WORKERS, "r/" + "a" * 499, ["python"], mode="trainjob", runtime=runtime)
    (problem,) = info.value.problems
    assert problem.field == "image"
    assert problem.message.endswith("(501 characters) is longer than the 500 characters a TrainJob's image may "
                                    "have (the Trainer CRD's spec.trainer.image maxLength)")
    assert problem.fix == "use an image reference of at most 500 characters, e.g. 'registry.example/train:1.0'"
    for mode in ("tfjob", "plain", "mpijob"):  # their CRDs and the Pod schema set no limit
        assert k8s_manifests(WORKERS, "r/" + "a" * 600, ["python"], mode=mode)


def test_a_trainjob_command_with_more_items_than_the_crd_allows_is_refused():
    """spec.trainer.command maxItems 128, mpirun's own words included; one item at most 1 MiB."""
    fits = ["w"] * (128 - len(mpirun_command(1, 1, [])))
    (job,) = k8s_manifests(WORKERS, "img", fits, mode="trainjob", runtime="rt")
    assert len(job["spec"]["trainer"]["command"]) == 128
    with pytest.raises(ClusterConfigError) as info:
        k8s_manifests(WORKERS, "img", [*fits, "w"], mode="trainjob", runtime="rt")
    (problem,) = info.value.problems
    assert (problem.field, problem.message) == ("command", "has 111 words, and with the 18 of mpirun the "
                                                "TrainJob's command has 129, above the 128 the Trainer CRD "
                                                "allows (spec.trainer.command maxItems)")
    assert problem.fix.startswith("use at most 110 words: ")
    with pytest.raises(ClusterConfigError) as info:
        k8s_manifests(WORKERS, "img", ["python", "x" * (2**20 + 1)], mode="trainjob", runtime="rt")
    assert "word 2 is 1,048,577 characters long, above the 1,048,576" in str(info.value)
    assert k8s_manifests(WORKERS, "img", [*fits, "w"], mode="mpijob")  # the MPIJob CRD sets no limit


@pytest.mark.parametrize("image", [" img:1", "img:1\n", "img:1\t"])
def test_an_image_with_surrounding_whitespace_is_refused_in_every_mode(image):
    """The API server refuses an image with leading or trailing whitespace (no schema says so)."""
    for mode in k8s.K8S_MODES:
        with pytest.raises(ClusterConfigError) as info:
            k8s_manifests(WORKERS, image, ["python"], mode=mode,
                          runtime="rt" if mode == "trainjob" else None)
        (problem,) = info.value.problems
        assert problem.field == "image" and "leading or trailing whitespace" in problem.message
        assert problem.fix == "drop it: 'img:1'"
