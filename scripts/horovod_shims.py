"""Write the forwarding headers Horovod 0.28.1 needs to compile against TensorFlow >= 2.18.

Horovod's sources include XLA headers under their old ``tensorflow/compiler/xla/`` paths;
TensorFlow now ships them under ``xla/``. Each shim is a one-line ``#include`` of the new
location, so no TensorFlow file is copied. Usage::

    python scripts/horovod_shims.py OUT_DIR    # then CPLUS_INCLUDE_PATH=OUT_DIR
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# old include path (as Horovod spells it) -> where TensorFlow's include tree has it now
FORWARDS = {
    "tensorflow/compiler/xla/client/xla_builder.h": "xla/hlo/builder/xla_builder.h",
    "tensorflow/compiler/xla/shape.h": "xla/shape.h",
    "tensorflow/compiler/xla/xla_data.pb.h": "xla/xla_data.pb.h",
}


def tensorflow_include_dir() -> Path:
    """The include tree of the installed TensorFlow, found without importing it."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("tensorflow is not installed in this Python; install it first")
    return Path(list(spec.submodule_search_locations)[0]) / "include"


def write_shims(out_dir: Path, include_dir: Path) -> list[Path]:
    """Write one forwarding header per entry of FORWARDS below ``out_dir``."""
    written = []
    for old, new in FORWARDS.items():
        if not (include_dir / new).is_file():
            raise SystemExit(f"{include_dir / new} is missing: this TensorFlow's layout is not "
                             "the one the shims were written for")
        shim = out_dir / old
        shim.parent.mkdir(parents=True, exist_ok=True)
        guard = "TFDIST_SHIM_" + "".join(c if c.isalnum() else "_" for c in old).upper()
        shim.write_text(f"#ifndef {guard}\n#define {guard}\n#include \"{new}\"\n#endif\n")
        written.append(shim)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python scripts/horovod_shims.py OUT_DIR")
    for path in write_shims(Path(sys.argv[1]), tensorflow_include_dir()):
        print(path)
