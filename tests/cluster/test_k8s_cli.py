"""``tfdist tf-config --format k8s``: the modes and resource options from the command line, and every
refusal as a usage error (exit 2) naming its option. Schema validation: test_k8s_schemas.py."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from support import examples

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
    # issue 34: non-ASCII digits were written into the YAML as is; the Trainer CRD's limits
    ([*WORKERS, *K8S, "--cpu-per-task", "٢"], "Error: Invalid value for '--cpu-per-task': '٢' holds '٢' (U+0662 "
     "ARABIC-INDIC DIGIT TWO), which is not ASCII; numbers are read in ASCII only, as Kubernetes reads them; fix: "
     "type it as '2'"),
    ([*WORKERS, *K8S, "--k8s-mode", "mpijob", "--k8s-command", "p", "--memory-per-task", "１６Gi"],
     "Error: Invalid value for '--memory-per-task': '１６Gi' holds '１' (U+FF11 FULLWIDTH DIGIT ONE), which is not "
     "ASCII; numbers are read in ASCII only, as Kubernetes reads them; fix: type it as '16Gi'"),
    ([*WORKERS, *K8S, "--gpus-per-task", "٢"], "Invalid value for '--gpus-per-task': '٢' holds '٢' (U+0662"),
    ([*WORKERS, "--format", "k8s", "--k8s-image", "r/" + "a" * 499, "--k8s-mode", "trainjob", "--k8s-runtime", "rt",
      "--k8s-command", "p"], "Error: Invalid value for '--k8s-image': 'r/aaaaaaaa"),
    ([*WORKERS, *K8S, "--k8s-mode", "trainjob", "--k8s-runtime", "rt", "--k8s-command", "p " * 111],
     "Error: Invalid value for '--k8s-command': has 111 words, and with the 18 of mpirun the TrainJob's command has "
     "129, above the 128 the Trainer CRD allows (spec.trainer.command maxItems); fix: use at most 110 words"),
    ([*WORKERS, "--format", "k8s", "--k8s-image", "img:1 "], "Error: Invalid value for '--k8s-image': 'img:1 ' has "
     "leading or trailing whitespace"),
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


#: Text that looks like a quantity: ASCII digits, units and spaces mixed with digits of every script,
#: Unicode spaces and fullwidth forms (what `int`, `float` and the regex's \\d read as numbers).
QUANTITY_LIKE = st.text(st.one_of(st.sampled_from("0123456789.mkMGTiE +-"),
                                  st.characters(categories=["Nd"]), st.characters(categories=["Zs"]),
                                  st.sampled_from("１６Ｇｉ\u3000\u00a0")), max_size=8)


@settings(max_examples=examples(200), deadline=None)
@given(st.sampled_from(["tfjob", "plain", "mpijob", "trainjob"]),
       st.sampled_from(["--cpu-per-task", "--memory-per-task", "--gpus-per-task"]), QUANTITY_LIKE)
def test_fuzzed_quantities_are_written_in_ascii_or_refused_naming_the_option(mode, option, text):
    """Issue 34: whatever the text, the manifest holds the quantity in ASCII as given (GPUs: a number), or
    the command exits 2 naming the option, with the fix; a non-ASCII character is never written."""
    extra = ["--k8s-command", "python t.py"] + (["--k8s-runtime", "rt"] if mode == "trainjob" else [])
    result = run(*WORKERS, *K8S, "--k8s-mode", mode, *extra, option, text)
    if result.exit_code == 0:
        assert text.isascii(), text
        docs = list(yaml.safe_load_all(result.stdout))
        written = {str(v) for d in docs for v in _resource_values(d)}
        expected = str(int(text)) if option == "--gpus-per-task" else text.strip()
        assert written == (set() if expected == "0" else {expected}), (written, expected)
    else:
        assert result.exit_code == 2, result.output
        line = error(result)
        assert line.startswith(f"Error: Invalid value for '{option}': ") and "; fix: " in line
        if not text.isascii():
            assert "which is not ASCII" in line


def _resource_values(doc):
    """Every value under a container's resources (requests and limits) in a manifest."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in ("resources", "resourcesPerNode"):
                for part in value.values():
                    yield from part.values()
            else:
                yield from _resource_values(value)
    elif isinstance(doc, list):
        for item in doc:
            yield from _resource_values(item)
