"""Why horovodrun failed, from its stderr (tfdist/launch/horovod_output.py); the texts are Horovod 0.28's."""
from __future__ import annotations

import pytest

from tfdist.launch.horovod_output import MAX_SUMMARY, explain_failure

RANK_EXITED = """\
[1]<stderr>:Traceback (most recent call last):
[1]<stderr>:  File "train.py", line 3, in <module>
[1]<stderr>:ValueError: bad batch size 0
[0]<stderr>:Terminated
Traceback (most recent call last):
  File "/venv/bin/horovodrun", line 8, in <module>
    sys.exit(run_commandline())
  File "/venv/lib/python3.11/site-packages/horovod/runner/gloo_run.py", line 284, in launch_gloo
    raise RuntimeError('Horovod detected that one or more processes exited with non-zero '
RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the job \
to be terminated. The first process to do so was:
Process name: 1
Exit code: 2
""".splitlines()
NO_INTERFACE = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/horovod/runner/launch.py", line 659, in _run_static
    nics = driver_service.get_common_interfaces(settings, all_host_names,
  File "/venv/lib/python3.11/site-packages/horovod/runner/driver/driver_service.py", line 211, in get_local_interfaces
    raise ValueError('No interface is found for address 127.0.0.1.')
ValueError: No interface is found for address 127.0.0.1.
""".splitlines()


def test_a_rank_that_exited_is_named_with_its_own_error():
    assert explain_failure(RANK_EXITED) == "rank 1 exited with code 2 (ValueError: bad batch size 0)"


def test_a_rank_that_exited_without_a_traceback():
    lines = [line for line in RANK_EXITED if not line.startswith("[1]")]
    assert explain_failure(lines) == "rank 1 exited with code 2"


def test_horovodruns_own_error_is_its_last_exception_line():
    assert explain_failure(NO_INTERFACE) == "ValueError: No interface is found for address 127.0.0.1."


@pytest.mark.parametrize("lines", [[], ["some output", "more output"], ["[0]<stderr>:ValueError: a rank's"]])
def test_nothing_recognisable_says_nothing(lines):
    assert explain_failure(lines) is None


def test_the_summary_stays_short():
    text = explain_failure(["Traceback (most recent call last):", "OSError: " + "x" * 10_000])
    assert text.startswith("OSError: xxx") and len(text) <= MAX_SUMMARY
