"""A command is a thin shell (issue 21 item 3): every module of tfdist/cli parses, calls the library
and maps its errors; none imports another command's module (lazy imports included), and none builds
or reads cluster specs itself. Read from the sources (AST), so it is fast and needs no TensorFlow."""
from __future__ import annotations

import ast
import pathlib

import tfdist
from tfdist.cli.main import _COMMANDS

CLI = pathlib.Path(tfdist.__file__).resolve().parent / "cli"
COMMAND_MODULES = {target.split(":")[0] for target in _COMMANDS.values()}
#: The library's spec builders and readers: a command calling one holds logic of tfdist.cluster.
SPEC_BUILDERS = {"ClusterSpec", "round_robin_cluster", "local_cluster", "load_cluster_file", "cluster_from_data",
                 "expand_hostlist", "parse_yaml", "parse_json", "parse_text", "load_cluster_data",
                 "split_address", "parse_task_lists"}


def _imported_modules(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def command_imports(source: str, module: str) -> list[str]:
    """The other command modules that `source` (the text of `module`) imports."""
    return sorted(_imported_modules(ast.parse(source)) & (COMMAND_MODULES - {module}))


def spec_building_calls(source: str) -> list[str]:
    """``name:line`` of every call of a spec builder (``ClusterSpec(...)``, ``ClusterSpec.from_dict(...)``,
    ``round_robin_cluster(...)``, ...) in `source`."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                func = func.value if func.value.id == "ClusterSpec" else func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in SPEC_BUILDERS:
                calls.append(f"{name}:{node.lineno}")
    return calls


def _cli_sources() -> dict[str, str]:
    return {f"tfdist.cli.{path.stem}": path.read_text() for path in sorted(CLI.glob("*.py"))}


def test_the_checks_can_fail():
    """What the old commands did: cli/launch.py imported cli/advise.py, cli/tf_config.py built specs."""
    assert command_imports("def f():\n    from tfdist.cli.advise import render\n", "tfdist.cli.launch") == \
        ["tfdist.cli.advise"]
    assert command_imports("from tfdist.cli import tf_config\n", "tfdist.cli.launch") == ["tfdist.cli.tf_config"]
    assert spec_building_calls("spec = ClusterSpec(chief=c)\nround_robin_cluster(h, workers=2)\n"
                               "ClusterSpec.from_dict(d)\n") == ["ClusterSpec:1", "round_robin_cluster:2",
                                                                 "ClusterSpec:3"]


def test_no_command_imports_another_command():
    offenders = {module: found for module, source in _cli_sources().items()
                 if (found := command_imports(source, module))}
    assert offenders == {}


def test_no_command_builds_or_reads_cluster_specs():
    offenders = {module: found for module, source in _cli_sources().items()
                 if (found := spec_building_calls(source))}
    assert offenders == {}
