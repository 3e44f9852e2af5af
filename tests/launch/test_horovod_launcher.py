"""tfdist.launch.horovod_launcher: horovodrun with its build check answered from a cache of Horovod's own
answer. The cache tests need no TensorFlow (Horovod's check is replaced by a fake that records its
calls); one real 2-rank job checks that the launcher's process tree imports no TensorFlow."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import REPO, subprocess_env

from tfdist.launch import horovod_launcher as hl

pytest.importorskip("horovod.runner.launch")
import horovod  # noqa: E402
import horovod.common.util as hvd_util  # noqa: E402
import horovod.runner.gloo_run as hvd_gloo_run  # noqa: E402
import horovod.runner.launch as hvd_launch  # noqa: E402

HOROVOD_DIR = Path(horovod.__file__).parent


class Check:
    """A stand-in for Horovod's ``gloo_built``: records its calls, answers ``value`` (or raises)."""

    def __init__(self, value=True):
        self.value, self.calls = value, []

    def __call__(self, verbose=False):
        self.calls.append(verbose)
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value


def _fake_horovod(root: Path) -> Path:
    """A Horovod directory with a TensorFlow extension library (what build_key stats)."""
    library = root / "horovod" / "tensorflow" / ("mpi_lib" + hvd_util.get_ext_suffix())
    library.parent.mkdir(parents=True)
    library.write_bytes(b"\0" * 10)
    return root / "horovod"


def _cache(tmp_path: Path, horovod_dir: Path = HOROVOD_DIR, version: str = horovod.__version__):
    return hl.BuildCheckCache(tmp_path / "cache", hl.build_key(horovod_dir, version), horovod_dir)


def test_the_cache_place_follows_xdg(tmp_path):
    assert hl.cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "tfdist"
    home = Path(os.path.expanduser("~"))
    assert hl.cache_dir({}) == home / ".cache" / "tfdist"
    assert hl.cache_dir({"XDG_CACHE_HOME": "relative/dir"}) == home / ".cache" / "tfdist"  # XDG: ignored


def test_the_key_names_horovods_version_and_its_extension_library():
    key = hl.build_key(HOROVOD_DIR, horovod.__version__)
    library = HOROVOD_DIR / "tensorflow" / ("mpi_lib" + hvd_util.get_ext_suffix())
    stat = library.stat()
    assert key["horovod"] == horovod.__version__
    assert [str(library), stat.st_size, stat.st_mtime_ns] in key["libraries"]


def test_a_miss_asks_horovod_once_and_a_hit_never(tmp_path):
    check = Check(True)
    cache = _cache(tmp_path)
    assert cache.answer("gloo_built", check) is True and check.calls == [False]
    stored = json.loads(cache.path.read_text())
    assert stored == {"key": cache.key, "answers": {"gloo_built": True}}
    assert [p.name for p in cache.directory.iterdir()] == [cache.path.name], "no temporary file is left"
    again = _cache(tmp_path)  # another launch
    assert again.answer("gloo_built", Check(AssertionError("Horovod's check must not run"))) is True
    assert again.answer("mpi_built", Check(False)) is False  # another check: a miss, stored beside it
    assert json.loads(cache.path.read_text())["answers"] == {"gloo_built": True, "mpi_built": False}


def test_verbose_runs_horovods_own_check_so_its_messages_print(tmp_path):
    cache = _cache(tmp_path)
    cache.answer("gloo_built", Check(True))
    check = Check(True)
    assert cache.answer("gloo_built", check, verbose=True) is True and check.calls == [True]


def test_a_none_answer_is_not_stored(tmp_path):
    cache = _cache(tmp_path)
    assert cache.answer("gloo_built", Check(None)) is None
    assert not cache.path.exists()


@pytest.mark.parametrize("change", ["mtime", "size", "version"])
def test_a_rebuilt_library_or_another_horovod_is_a_miss(tmp_path, change):
    root = _fake_horovod(tmp_path / "site")
    _cache(tmp_path, root, "0.28.1").answer("gloo_built", Check(True))
    library = next(root.rglob("mpi_lib*"))
    version = "0.28.1"
    if change == "mtime":
        stat = library.stat()
        os.utime(library, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    elif change == "size":
        stat = library.stat()
        library.write_bytes(b"\0" * 11)
        os.utime(library, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime, other size
    else:
        version = "0.28.2"
    check = Check(False)
    assert _cache(tmp_path, root, version).answer("gloo_built", check) is False and check.calls == [False]
    assert _cache(tmp_path, root, version).read() == {"gloo_built": False}


def test_without_an_extension_library_there_is_no_key_and_horovod_answers(tmp_path):
    empty = tmp_path / "horovod"
    empty.mkdir()
    cache = _cache(tmp_path, empty)
    assert cache.key is None
    check = Check(True)
    assert cache.answer("gloo_built", check) and cache.answer("gloo_built", check) and len(check.calls) == 2
    assert not cache.path.exists()


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b'{"key": 1}', b"[]",
                                     b'{"key": null, "answers": {"gloo_built": true}}'])
def test_a_corrupt_cache_file_means_horovods_check_runs_and_is_stored(tmp_path, content):
    cache = _cache(tmp_path)
    cache.directory.mkdir()
    cache.path.write_bytes(content)
    check = Check(True)
    assert cache.answer("gloo_built", check) is True and check.calls == [False]
    assert cache.read() == {"gloo_built": True}


def test_a_non_bool_answer_in_the_file_is_not_believed(tmp_path):
    cache = _cache(tmp_path)
    cache.directory.mkdir()
    cache.path.write_text(json.dumps({"key": cache.key, "answers": {"gloo_built": "yes"}}))
    check = Check(False)
    assert cache.answer("gloo_built", check) is False and check.calls == [False]


def test_an_unwritable_cache_dir_means_horovods_check_runs_every_time(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")  # the cache directory would be inside a file: mkdir fails, even for root
    key = hl.build_key(HOROVOD_DIR, horovod.__version__)
    cache = hl.BuildCheckCache(blocker / "tfdist", key, HOROVOD_DIR)
    check = Check(True)
    assert cache.answer("gloo_built", check) is True and cache.answer("gloo_built", check) is True
    assert check.calls == [False, False]


def test_an_unreadable_cache_file_means_horovods_check_runs(tmp_path):
    cache = _cache(tmp_path)
    cache.path.mkdir(parents=True)  # a directory where the file should be: reading it fails, even for root
    check = Check(True)
    assert cache.answer("gloo_built", check) is True and check.calls == [False]


def _seed(xdg: Path, answers: dict[str, bool]) -> Path:
    """The cache file a launch with ``XDG_CACHE_HOME=xdg`` reads, holding ``answers`` under the real key."""
    cache = hl.BuildCheckCache(hl.cache_dir({"XDG_CACHE_HOME": str(xdg)}),
                               hl.build_key(HOROVOD_DIR, horovod.__version__), HOROVOD_DIR)
    cache.directory.mkdir(parents=True, exist_ok=True)
    cache.path.write_text(json.dumps({"key": cache.key, "answers": answers}))
    return cache.path


def test_a_cached_false_gives_horovods_own_refusal(tmp_path, monkeypatch):
    _seed(tmp_path, {"gloo_built": False})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main sets it to horovodrun's
    check = Check(AssertionError("Horovod's check must not run"))
    monkeypatch.setattr(hvd_util, "gloo_built", check)
    monkeypatch.setattr(hvd_launch, "gloo_built", check)
    monkeypatch.setattr(hvd_launch, "mpi_built", hvd_launch.mpi_built)  # undone after the test
    monkeypatch.setattr(hvd_gloo_run, "register_shutdown_event", hvd_gloo_run.register_shutdown_event)  # likewise
    with pytest.raises(ValueError, match="Gloo support has not been built.  If this is not expected"):
        hl.main(["-np", "1", "-H", "localhost:1", "--gloo", "/bin/true"])
    assert check.calls == []


def test_main_guards_horovods_shutdown_signals_before_horovod_starts_the_job(monkeypatch):
    """A parent-death SIGTERM can come more than once; Horovod's bare handler then deadlocked
    (test_upstream)."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(hl, "install_cache", lambda: None)
    monkeypatch.setattr(hvd_gloo_run, "register_shutdown_event", hvd_gloo_run.register_shutdown_event)
    installed = []
    monkeypatch.setattr(hvd_launch, "run_commandline",
                        lambda: installed.append(hvd_gloo_run.register_shutdown_event.__module__) or 0)
    assert hl.main(["-np", "1", "-H", "localhost:1", "--gloo", "/bin/true"]) == 0
    assert installed == ["tfdist.upstream"]


# A launcher run as `python -m tfdist.launch.horovod_launcher` with Horovod's check replaced by one that
# writes to CALLS; a job that starts rank processes (each prints its line and exits).
_LAUNCH = textwrap.dedent("""\
    import os, runpy, sys
    import horovod.common.util as util
    import horovod.runner.launch as launch

    def gloo_built(verbose=False):
        with open(os.environ["CALLS"], "a") as calls:
            calls.write("gloo_built\\n")
        return True

    util.gloo_built = launch.gloo_built = gloo_built
    runpy.run_module("tfdist.launch.horovod_launcher", run_name="__main__", alter_sys=True)
""")


@pytest.mark.parametrize("broken", ["corrupt", "unwritable"])
def test_with_a_broken_cache_the_job_still_runs(tmp_path, broken):
    xdg = tmp_path / "xdg"
    if broken == "corrupt":
        _seed(xdg, {}).write_text("{truncated")
    else:
        xdg.write_text("")  # XDG_CACHE_HOME is a file: the cache directory cannot be made
    calls = tmp_path / "calls"
    result = subprocess.run([sys.executable, "-c", _LAUNCH, "-np", "2", "-H", "localhost:2", "--gloo",
                             sys.executable, "-c", "import os; print('rank', os.environ['HOROVOD_RANK'])"],
                            capture_output=True, text=True, timeout=120, cwd=REPO,
                            env=subprocess_env(XDG_CACHE_HOME=str(xdg), CALLS=str(calls)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(line.split(":", 1)[1] for line in result.stdout.splitlines() if "rank" in line) == [
        "rank 0", "rank 1"]
    assert calls.read_text() == "gloo_built\n", "Horovod's own check answers when the cache cannot"


def test_tfdist_launch_reports_the_launcher_as_horovodrun(tmp_path, monkeypatch):
    """The entry's argv[0] is python; what tfdist prints still names horovodrun."""
    from click.testing import CliRunner

    from tfdist.cli.launch import launch

    record = tmp_path / "argv"
    stand_in = [sys.executable, "-c",
                f"import sys, json; open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))"]
    monkeypatch.setattr("tfdist.launch.commands.horovod_launcher", lambda *a, **k: stand_in)
    result = CliRunner().invoke(launch, ["--backend", "horovod", "-np", "2", "--network-interface", "lo",
                                         "--", "/bin/echo", "t.py"])
    assert result.exit_code == 0, result.output
    assert json.loads(record.read_text()) == ["--network-interface", "lo", "-np", "2", "-H", "localhost:2",
                                              "--gloo", "/bin/echo", "t.py"]
    assert "tfdist launch: horovodrun exited with code 0" in result.output


# Records, from the launcher and every process forked from it (Horovod's check child is a fork), each
# process that imports TensorFlow. The ranks are new interpreters (exec), without the spy.
_SPY = textwrap.dedent("""\
    import os, runpy, sys

    class Spy:
        def find_spec(self, name, path=None, target=None):
            if name == "tensorflow":
                with open(os.environ["TF_IMPORTS"], "a") as log:
                    log.write(f"{os.getpid()}\\n")
            return None

    sys.meta_path.insert(0, Spy())
    runpy.run_module("tfdist.launch.horovod_launcher", run_name="__main__", alter_sys=True)
""")


@pytest.mark.slow
@pytest.mark.horovod
def test_a_real_job_through_the_entry_imports_no_tensorflow_in_the_launcher(tmp_path):
    """-np 2 -H localhost:2 --gloo, the ranks printing their rank and size through horovod.tensorflow;
    with the cache warm (seeded with Horovod's answer) no process of the launcher's tree imports
    TensorFlow: with Horovod's own check, its forked child would."""
    _seed(tmp_path / "xdg", {"gloo_built": True})
    imports = tmp_path / "tf_imports"
    rank = "import horovod.tensorflow as hvd; hvd.init(); print(f'rank={hvd.rank()} size={hvd.size()}')"
    result = subprocess.run([sys.executable, "-c", _SPY, "-np", "2", "-H", "localhost:2", "--gloo",
                             sys.executable, "-c", rank],
                            capture_output=True, text=True, timeout=300, cwd=REPO,
                            env=subprocess_env(XDG_CACHE_HOME=str(tmp_path / "xdg"), TF_IMPORTS=str(imports)))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ranks = sorted(line.split(":", 1)[1] for line in result.stdout.splitlines() if "rank=" in line)
    assert ranks == ["rank=0 size=2", "rank=1 size=2"]
    assert not imports.exists(), f"the launcher's process tree imported TensorFlow: {imports.read_text()}"
