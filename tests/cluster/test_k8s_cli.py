"""``tfdist tf-config --format k8s``: the modes and resource options from the command line, and every
refusal as a usage error (exit 2) naming its option. Schema validation: test_k8s_schemas.py."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from tfdist.cli.main import cli
from tfdist.cluster.k8s import MPIRUN_FLAGS

WORKERS = ["--workers", "2", "--hosts", "n1,n2"]
PS = ["--workers", "2", "--hosts", "n1,n2,n3", "--ps-count", "1", "--with-chief"]
K8S = ["--format", "k8s", "--k8s-image", "img:1"]


def run(*args: str):
    result = CliRunner().invoke(cli, ["tf-config", *args], prog_name="tfdist")
    assert "Traceback" not in result.output
    return result


def error(result) -> str:
    assert result.exit_code == 2, result.output
    return result.output[result.output.index("Error: "):]


def test_mpijob_from_the_command_line():
    result = run(*WORKERS, *K8S, "--k8s-mode", "mpijob", "--k8s-command", "python train.py --lr 0.1",
                 "--gpus-per-task", "4", "--cpu-per-task", "8", "--memory-per-task", "32Gi", "--k8s-name", "hvd")
    assert result.exit_code == 0, result.output
    (job,) = yaml.safe_load_all(result.stdout)
    assert job["kind"] == "MPIJob" and job["metadata"]["name"] == "hvd" and job["spec"]["slotsPerWorker"] == 4
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"] == ["mpirun", "-np", "8", *MPIRUN_FLAGS, "python", "train.py", "--lr", "0.1"]
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"] == {"requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"nvidia.com/gpu": 4}}


def test_trainjob_from_the_command_line():
    result = run(*WORKERS, *K8S, "--k8s-mode", "trainjob", "--k8s-runtime", "horovod-distributed",
                 "--k8s-command", "python train.py")
    assert result.exit_code == 0, result.output
    (job,) = yaml.safe_load_all(result.stdout)
    assert job["kind"] == "TrainJob" and job["spec"]["runtimeRef"]["name"] == "horovod-distributed"
    assert (job["spec"]["trainer"]["numNodes"], job["spec"]["trainer"]["numProcPerNode"]) == (2, 1)


@pytest.mark.parametrize("mode, containers", [("tfjob", 2), ("plain", 3)])
def test_resources_reach_every_mode(mode, containers):
    """The chief and the workers get a GPU (a TFJob has one Worker template, plain one Pod per worker),
    the ps only the memory request."""
    result = run(*PS, *K8S, "--k8s-mode", mode, "--gpus-per-task", "1", "--memory-per-task", "2Gi")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.count("nvidia.com/gpu: 1") == containers and text.count("memory: 2Gi") == containers + 1


@pytest.mark.parametrize("args, message", [
    ([*WORKERS, "--gpus-per-task", "1"], "Error: --gpus-per-task only apply to --format k8s; fix: add --format k8s"),
    ([*WORKERS, "--cpu-per-task", "1", "--k8s-runtime", "r"], "Error: --k8s-runtime, --cpu-per-task only apply"),
    ([*WORKERS, *K8S, "--gpus-per-task", "-1"],
     "Error: Invalid value for '--gpus-per-task': -1 is not in the range 0<=x<=64; fix: give 0 to 64"),
    ([*WORKERS, *K8S, "--gpus-per-task", "65"], "Invalid value for '--gpus-per-task': 65 is not in the range"),
    ([*WORKERS, *K8S, "--gpus-per-task", "two"], "Invalid value for '--gpus-per-task': 'two' is not a whole number"),
    ([*WORKERS, *K8S, "--gpus-per-task", "9" * 5000], "Invalid value for '--gpus-per-task': '999999999999999999999999"),
    ([*WORKERS, *K8S, "--cpu-per-task", "0"], "Invalid value for '--cpu-per-task': '0' is below 1m"),
    ([*WORKERS, *K8S, "--cpu-per-task", "two"], "Invalid value for '--cpu-per-task': 'two' is not a CPU quantity"),
    ([*WORKERS, *K8S, "--memory-per-task", "512m"],
     "Invalid value for '--memory-per-task': '512m' has the suffix 'm' (m is milli"),
    ([*WORKERS, *K8S, "--memory-per-task", "8GB"], "Invalid value for '--memory-per-task': '8GB' has the suffix 'GB'"),
    ([*PS, *K8S, "--k8s-mode", "mpijob", "--k8s-command", "python t.py"],
     "Error: Invalid value for '--k8s-mode': --k8s-mode mpijob runs Horovod, whose cluster is workers only, but "
     "this cluster has 1 chief and 1 ps; fix: give only workers"),
    ([*WORKERS, *K8S, "--k8s-mode", "mpijob"],
     "Error: Invalid value for '--k8s-command': --k8s-mode mpijob needs the training command that mpirun starts"),
    ([*WORKERS, *K8S, "--k8s-mode", "trainjob", "--k8s-command", "p"],
     "Error: Invalid value for '--k8s-runtime': --k8s-mode trainjob references a ClusterTrainingRuntime"),
    ([*WORKERS, *K8S, "--k8s-runtime", "rt"],
     "Error: Invalid value for '--k8s-runtime': a runtime ('rt') is only used by --k8s-mode trainjob, not tfjob"),
    ([*WORKERS, *K8S, "--k8s-mode", "helm"], "Invalid value for '--k8s-mode': 'helm' is not one of"),
    ([*WORKERS, *K8S, "--gpus-per-task", "1", "--gpus-per-task", "2"], "Option '--gpus-per-task' was given 2 times"),
])
def test_refusals_name_the_option(args, message):
    text = error(run(*args))
    assert message in text, text
    if "was given" not in message and "is not one of" not in message:
        assert "; fix: " in text and "hint:" not in text


def test_several_problems_are_listed_with_their_options():
    text = error(run(*PS, *K8S, "--k8s-mode", "trainjob", "--k8s-name", "Bad"))
    assert text.splitlines() == [
        "Error: the Kubernetes options are invalid:",
        "  --k8s-name: 'Bad' is not a valid Kubernetes name; fix: use lower-case letters, digits and '-', "
        "starting with a letter and ending with a letter or digit",
        "  --k8s-mode: --k8s-mode trainjob runs Horovod, whose cluster is workers only, but this cluster has "
        "1 chief and 1 ps; fix: give only workers (--worker or --workers), or use --k8s-mode tfjob for a "
        "chief/ps cluster",
        "  --k8s-command: --k8s-mode trainjob needs the training command that mpirun starts on every worker; "
        "fix: pass it, e.g. --k8s-command 'python train.py'",
        "  --k8s-runtime: --k8s-mode trainjob references a ClusterTrainingRuntime, and none was named; fix: pass "
        "the name of one with an MPI mlPolicy, e.g. --k8s-runtime horovod-distributed (docs/kubernetes.md "
        "shows one)",
    ]


def test_help_names_the_modes_and_resource_options():
    text = run("--help").output
    for word in ("mpijob", "trainjob", "--gpus-per-task", "--cpu-per-task", "--memory-per-task", "--k8s-runtime"):
        assert word in text, word
