"""tfdist.cluster.sbatch and ``tfdist tf-config --format sbatch``: the batch script's lines, every refusal
naming its option, and the script run by bash under a stand-in ``srun`` (no SLURM, no TensorFlow) so
each task's TF_CONFIG and the command's words are checked. On a real SLURM: tests/multihost/test_slurm.py."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import examples, invoke, subprocess_env
from tfdist.cluster.errors import ClusterConfigError
from tfdist.cluster.sbatch import TASK_SHELL_NAME, BatchJob, render_sbatch, srun_argv

PS_JOB = BatchJob(command=("python", "train.py"), workers=1, ps=1, chief=True)

# Stands in for srun: drops its options, then runs the task command once per task with the variables
# srun sets (taken from FAKE_* variables), stopping at the first task that fails.
FAKE_SRUN = """#!/bin/bash
while [[ "$1" == --* ]]; do shift; done
for ((i = 0; i < FAKE_NTASKS; i++)); do
  SLURM_JOB_NODELIST="$FAKE_NODELIST" SLURM_NTASKS="$FAKE_NTASKS" SLURM_PROCID="$i" \\
    SLURM_TASKS_PER_NODE="$FAKE_TASKS_PER_NODE" "$@" || exit $?
done
"""
# The user's command: records its TF_CONFIG and its arguments in OUT/<procid>.json.
RECORD = ("import json, os, sys; json.dump({'tf_config': json.loads(os.environ['TF_CONFIG']), "
          "'argv': sys.argv[1:]}, "
          "open(os.path.join(os.environ['OUT'], os.environ['SLURM_PROCID'] + '.json'), 'w'))")


def sbatch_lines(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith("#SBATCH")]


def test_the_script_asks_for_one_node_per_task_by_default():
    script = render_sbatch(PS_JOB)
    assert script.startswith("#!/bin/bash\n")
    assert sbatch_lines(script) == ["#SBATCH --job-name=tfdist", "#SBATCH --nodes=3",
                                    "#SBATCH --ntasks=3", "#SBATCH --ntasks-per-node=1", "#SBATCH --no-kill"]
    last = script.splitlines()[-1]
    assert last.startswith("exec srun --no-kill --distribution=block bash -c ")
    words = shlex.split(last)
    assert words[-3:] == [TASK_SHELL_NAME, "python", "train.py"]
    assert "tfdist tf-config --format slurm --ps-count 1 --with-chief --port 2222" in words[6]


def test_only_a_job_with_ps_tasks_survives_a_lost_node():
    """--no-kill (job and step) for a parameter-server job, whose chief goes on without a lost worker;
    SLURM's default (end the job) for one without ps, whose collectives stall without any worker."""
    ps_job = render_sbatch(BatchJob(command=("train",), workers=2, ps=1, chief=True, nodes=3))
    assert sbatch_lines(ps_job)[-1] == "#SBATCH --no-kill"
    assert shlex.split(ps_job.splitlines()[-1])[:4] == ["exec", "srun", "--no-kill", "--distribution=block"]
    collective = render_sbatch(BatchJob(command=("train",), workers=3, nodes=2))
    assert "--no-kill" not in collective
    assert shlex.split(collective.splitlines()[-1])[:3] == ["exec", "srun", "--distribution=block"]


def test_fewer_nodes_than_tasks_leaves_the_placement_to_slurm():
    script = render_sbatch(BatchJob(command=("train",), workers=3, ps=0, chief=False, nodes=2, port=3000))
    assert sbatch_lines(script)[1:] == ["#SBATCH --nodes=2", "#SBATCH --ntasks=3"]
    inner = srun_argv(BatchJob(command=("train",), workers=3, port=3000))[4]
    assert "--format slurm --port 3000)" in inner
    assert "--ps-count" not in inner and "--with-chief" not in inner


@pytest.mark.parametrize("job, field, words", [
    (BatchJob(command=(), workers=1), "command", "needs a command"),
    (BatchJob(command=("", "train.py"), workers=1), "command", "whose first word, the program to run, is empty"),
    (BatchJob(command=("x",), workers=0), "workers", "at least one worker"),
    (BatchJob(command=("x",), workers=1, ps=1), "chief", "needs a chief"),
    (BatchJob(command=("x",), workers=2, nodes=3), "nodes", "is 3, for 2 task(s)"),
    (BatchJob(command=("x",), workers=2, nodes=0), "nodes", "ask for 1 to 2 nodes"),
    (BatchJob(command=("x",), workers=2, port=65535), "port", "past 65535"),
    (BatchJob(command=("x",), workers=1, job_name="a b"), "job_name", "'a b'"),
])
def test_a_job_that_cannot_run_is_refused_naming_the_field(job, field, words):
    with pytest.raises(ClusterConfigError) as caught:
        render_sbatch(job)
    (problem,) = caught.value.problems
    assert problem.field == field and words in str(problem) and "; fix: " in str(problem)


def test_the_cli_prints_the_script_the_library_writes():
    result = invoke("tf-config", "--format", "sbatch", "--workers", "1", "--ps-count", "1", "--with-chief",
                    "--sbatch-command", "python train.py")
    assert result.exit_code == 0, result.output
    assert result.stdout == render_sbatch(PS_JOB)


def test_an_empty_argument_is_a_valid_word_of_the_command():
    """Issue 34: `--sbatch-command "python train.py --tag ''"` was refused with `every task needs a command`."""
    result = invoke("tf-config", "--format", "sbatch", "--workers", "1", "--sbatch-command",
                    "python train.py --tag ''")
    assert result.exit_code == 0, result.output
    assert shlex.split(result.stdout.splitlines()[-1])[-5:] == [TASK_SHELL_NAME, "python", "train.py", "--tag", ""]
    assert result.stdout == render_sbatch(BatchJob(command=("python", "train.py", "--tag", ""), workers=1))


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"])), max_size=6),
       st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), min_size=1))
def test_any_words_after_a_program_reach_the_task_unchanged(words, program):
    """A property: every command whose first word is not empty is written, and the script's srun line gives
    the task exactly those words (empty ones, quotes, spaces, `$`, newlines included)."""
    command = (program, *words)
    script = render_sbatch(BatchJob(command=command, workers=1))
    line = script[script.index("\nexec srun ") + 1:]
    assert shlex.split(line)[-len(command) - 1:] == [TASK_SHELL_NAME, *command]


@pytest.mark.parametrize("args, option, words", [
    (["--ps-count", "1", "--with-chief", "--sbatch-command", "x"], "'--workers'", "the number of workers"),
    (["--workers", "1"], "'--sbatch-command'", "needs the command"),
    (["--workers", "1", "--sbatch-command", "'' train.py"], "'--sbatch-command'", "the program to run, is empty"),
    (["--workers", "1", "--sbatch-command", "x 'y"], "'--sbatch-command'", "balance the quotes"),
    (["--workers", "1", "--ps-count", "1", "--sbatch-command", "x"], "'--with-chief'", "needs a chief"),
    (["--workers", "2", "--sbatch-nodes", "3", "--sbatch-command", "x"], "'--sbatch-nodes'", "is 3, for 2"),
])
def test_the_cli_refuses_bad_options_naming_them(args, option, words):
    result = invoke("tf-config", "--format", "sbatch", *args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {option}" in result.output and words in result.output
    assert "Traceback" not in result.output


def test_the_cli_lists_every_problem_and_refuses_what_sbatch_does_not_take():
    several = invoke("tf-config", "--format", "sbatch", "--workers", "0", "--ps-count", "1",
                     "--sbatch-command", "x")
    assert several.exit_code == 2
    assert "--workers: is 0" in several.output and "--with-chief: is off" in several.output
    hosts = invoke("tf-config", "--format", "sbatch", "--workers", "2", "--hosts", "a,b",
                   "--sbatch-command", "x")
    assert hosts.exit_code == 2 and "--hosts cannot be used with --format sbatch" in hosts.output
    stray = invoke("tf-config", "--workers", "2", "--hosts", "a,b", "--sbatch-nodes", "2")
    assert stray.exit_code == 2 and "--sbatch-nodes only applies to --format sbatch" in stray.output


def _run_script(tmp_path, job: BatchJob, nodelist: str, tasks_per_node: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(job))
    out = tmp_path / "out"
    out.mkdir()
    env = subprocess_env(OUT=str(out), FAKE_NTASKS=str(job.ntasks), FAKE_NODELIST=nodelist,
                         FAKE_TASKS_PER_NODE=tasks_per_node)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"  # srun, then the venv's tfdist
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=120,
                          check=False)


def test_every_task_runs_the_command_with_its_own_tf_config(tmp_path):
    job = BatchJob(command=(sys.executable, "-c", RECORD, "--lr", "0.1 0.2", "$HOME", "--tag", ""), workers=2, ps=1,
                   chief=True, nodes=2, port=4000)
    result = _run_script(tmp_path, job, nodelist="h[1-2]", tasks_per_node="2(x2)")
    assert result.returncode == 0, result.stderr
    records = [json.loads((tmp_path / "out" / f"{i}.json").read_text()) for i in range(4)]
    cluster = {"chief": ["h1:4000"], "ps": ["h1:4001"], "worker": ["h2:4000", "h2:4001"]}
    for record in records:
        assert record["tf_config"]["cluster"] == cluster
        assert record["argv"] == ["--lr", "0.1 0.2", "$HOME", "--tag", ""]  # words unchanged, no second expansion
    assert [r["tf_config"]["task"] for r in records] == [
        {"type": "chief", "index": 0}, {"type": "ps", "index": 0},
        {"type": "worker", "index": 0}, {"type": "worker", "index": 1}]


def test_a_task_whose_tf_config_fails_never_runs_the_command(tmp_path):
    job = BatchJob(command=(sys.executable, "-c", RECORD), workers=1, ps=1, chief=True)
    result = _run_script(tmp_path, job, nodelist="h[1-", tasks_per_node="1(x3)")
    assert result.returncode == 2
    assert "SLURM_JOB_NODELIST" in result.stderr and "Traceback" not in result.stderr
    assert list((tmp_path / "out").iterdir()) == []
