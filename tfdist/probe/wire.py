"""The probe's wire protocol: what the driver (:mod:`tfdist.probe.driver`) and its agents
(:mod:`tfdist.probe.agent`) say to each other. Pure; imports only :mod:`tfdist.errors`, so the agent
on a remote host and the driver read and write the same lines.

* the driver writes one **specification** per agent, a JSON line on the agent's stdin
  (:func:`decode_spec` checks it: ``role`` one of :data:`ROLES`, ``timeout``, the role's
  :data:`REQUIRED` fields), then, to a ready compute agent, the :data:`GO` line; ending stdin stops it;
* every agent **answers** with one stdout line ``TFDIST_PROBE {json}`` (:func:`answer`,
  :func:`parse_answer`): ``{"result": ...}``, ``{"port": P}`` (a receiver), ``{"ready": true}`` (a
  compute agent) or ``{"error": ...}`` with exit code :data:`EXIT_FAILED`;
* a sender and a receiver agent exchange one-byte :data:`PING` round trips, then :data:`DATA` and
  the bulk bytes.

    spec = decode_spec(b'{"role": "send", "timeout": 60, "peer": "h2", "port": 5000, "seconds": 1, "pings": 20}')
    answer({"result": {"latency_s": 1e-4}})          # TFDIST_PROBE {"result":{"latency_s":0.0001}}
    parse_answer('noise\\nTFDIST_PROBE {"port": 5000}')   # {'port': 5000}
"""
from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import IO, Any

from tfdist.errors import TfdistError, with_fix

__all__ = ["DATA", "EXIT_ABANDONED", "EXIT_FAILED", "GO", "MARKER", "MAX_TIMEOUT", "PING", "REQUIRED", "ROLES",
           "ProbeAgentError", "answer", "decode_spec", "encode_spec", "parse_answer"]

MARKER = "TFDIST_PROBE "
ROLES = ("receive", "send", "compute")
EXIT_FAILED = 2
EXIT_ABANDONED = 3  # stdin ended or the hard timeout passed before the measurement finished
MAX_TIMEOUT = 86400.0  # s: a day, the bound of a specification's timeout (a sanity check)
GO = b"go"  # the stdin line that lets a ready compute agent time its steps
PING = b"P"
DATA = b"D"
REQUIRED = {"receive": ("host", "seconds", "skip"), "send": ("peer", "port", "seconds", "pings"),
            "compute": ("model", "batch_size", "cwd", "env", "steps", "min_seconds")}


class ProbeAgentError(TfdistError, RuntimeError):
    """A specification or a measurement the agent cannot carry out; the message ends with the fix."""


def encode_spec(spec: Mapping[str, Any]) -> str:
    """The specification line the driver writes to an agent's stdin (:func:`decode_spec` reads it)."""
    return json.dumps(dict(spec)) + "\n"


def decode_spec(line: bytes | str) -> dict[str, Any]:
    """The specification from the first stdin line, checked: ``role``, ``timeout`` and the role's fields."""
    fix = "start agents with `tfdist advise --probe` of the same tfdist version on every host"
    if not line:
        raise ProbeAgentError(with_fix("no probe specification on stdin (the prober went away)", fix))
    try:
        spec = json.loads(line)
    except ValueError as exc:
        raise ProbeAgentError(with_fix(f"the probe specification is not JSON ({exc})", fix)) from None
    if not isinstance(spec, dict) or spec.get("role") not in ROLES:
        role = spec.get("role") if isinstance(spec, dict) else type(spec).__name__
        raise ProbeAgentError(with_fix(f"the probe specification's role is {role!r}, expected one of {ROLES}",
                                       fix))
    missing = [name for name in ("timeout", *REQUIRED[spec["role"]]) if name not in spec]
    if missing:
        raise ProbeAgentError(with_fix(f"the {spec['role']} specification lacks {', '.join(missing)}", fix))
    timeout = spec["timeout"]
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT:
        raise ProbeAgentError(with_fix(f"the specification's timeout must be 0 to {MAX_TIMEOUT:.0f} s, got "
                                       f"{timeout!r}", fix))
    return spec


def answer(payload: Mapping[str, Any], out: IO[str] = sys.stdout) -> None:
    """Print one result line (``TFDIST_PROBE {json}``) and flush it."""
    out.write(MARKER + json.dumps(dict(payload), separators=(",", ":")) + "\n")
    out.flush()


def parse_answer(output: str) -> dict[str, Any] | None:
    """The last ``TFDIST_PROBE`` line of an agent's output as a dict, or None if there is none."""
    for line in reversed(output.splitlines()):
        if line.startswith(MARKER):
            try:
                value = json.loads(line[len(MARKER):])
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None

