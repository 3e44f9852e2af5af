"""Backend options: the base dataclass, value checks, and the rule that turns keywords into options.

Every backend declares its options as a frozen dataclass (``HorovodOptions``, ...). The rule of
``make_strategy(kind, **options)``:

* a name no backend declares is an error that lists every backend's options and suggests the
  closest name across all of them;
* a named backend refuses an option it does not declare (it would do nothing there);
* ``auto`` validates every option against the backend that owns it, then passes on only the
  options of the backend it picked, so one script serves every launcher and a wrong value fails
  on a laptop as it would on the cluster.

Importing this module does not import TensorFlow.
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Mapping

from tfdist.errors import TfdistError, with_fix


class UnknownOptionError(TfdistError, TypeError):
    """An option name that the chosen backend (or every backend) does not take."""


#: Why a backend does not take another's option, where the reason is not just a name.
_WHY_NOT = {("parameter_server", "compression"): "gradient compression (fp16, PowerSGD) acts on an allreduce, and "
                                                 "parameter servers pull variables and push gradients instead"}


class OptionValueError(TfdistError, ValueError):
    """An option's value is out of range or of the wrong type."""


@dataclasses.dataclass(frozen=True)
class StrategyOptions:
    """Options every backend accepts.

    scale_lr: multiply the optimizer's learning rate by the backend's ``lr_scale`` (the number of
        synchronous replicas; 1 where updates are not averaged) in ``strategy.optimizer()``.
    """

    scale_lr: bool = True

    def __post_init__(self) -> None:
        require_bool("scale_lr", self.scale_lr)


def options_for(kind: str, by_backend: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The ``make_strategy(kind, ...)`` options from a table of each backend's own, for scripts that
    offer a ``--strategy`` choice: a named backend gets only its own (it refuses the others'),
    ``auto`` gets all of them (it checks each against its owner and passes on the picked one's).

        horovod = {"warmup_epochs": 3, "compression": "fp16"}
        options = tfdist.options_for(args.strategy, {"horovod": horovod})
        strategy = tfdist.make_strategy(args.strategy, **options)
    """
    if kind == "auto":
        return {name: value for options in by_backend.values() for name, value in options.items()}
    return dict(by_backend.get(kind, {}))


def require_number(name: str, value: Any, minimum: float, integer: bool = False) -> None:
    """Raise ``OptionValueError`` naming option ``name`` unless ``value`` is a number >= ``minimum``."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < minimum:
        kind = "an integer" if integer else "a number"
        raise OptionValueError(with_fix(f"`{name}` must be {kind} >= {minimum:g}, got {value!r}",
                                        f"pass {name}={max(minimum, 1) if integer else minimum:g} or more"))


def require_bool(name: str, value: Any) -> None:
    """Raise ``OptionValueError`` unless ``value`` is ``True`` or ``False``."""
    if not isinstance(value, bool):
        raise OptionValueError(with_fix(f"`{name}` must be True or False, got {value!r}",
                                        f"pass {name}=True or {name}=False"))


def require_path(name: str, value: Any) -> None:
    """Raise ``OptionValueError`` unless ``value`` is ``None`` or a non-empty path (str or os.PathLike)."""
    import os

    if value is None:
        return
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise OptionValueError(with_fix(f"`{name}` must be a folder path (a non-empty string), got {value!r}",
                                        f"pass e.g. {name}='checkpoints', or leave it out"))


def require_strings(name: str, value: Any) -> None:
    """Raise ``OptionValueError`` unless ``value`` is ``None`` or a list/tuple of non-empty strings."""
    if value is None:
        return
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise OptionValueError(with_fix(f"`{name}` must be a list of device names, got {value!r}",
                                        f"pass e.g. {name}=['/gpu:0', '/gpu:1'], or leave it out"))


#: Options that describe the job itself: under ``auto`` they are refused unless the picked backend takes them.
CLUSTER_OPTIONS = frozenset({"cluster", "task_type", "task_index"})


def field_names(options_type: type[StrategyOptions]) -> list[str]:
    return [field.name for field in dataclasses.fields(options_type)]


def _suggestion(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def build_options(kind: str, options: Mapping[str, Any], option_types: Mapping[str, type[StrategyOptions]],
                  *, auto: bool = False) -> StrategyOptions:
    """The options of backend ``kind`` from ``options``, checked as the module docstring says.

    ``option_types`` maps every registered backend to its options dataclass.
    """
    owners: dict[str, list[str]] = {}
    for backend, options_type in option_types.items():
        for name in field_names(options_type):
            owners.setdefault(name, []).append(backend)
    unknown = sorted(set(options) - set(owners))
    if unknown:
        every = sorted(owners)
        listing = "; ".join(f"{backend}: {', '.join(field_names(options_type))}"
                            for backend, options_type in sorted(option_types.items()))
        hints = ", ".join(f"{name!r}{_suggestion(name, every)}" for name in unknown)
        raise UnknownOptionError(with_fix(f"unknown option(s) {hints}; options by strategy: {listing}",
                                          "correct the name, or drop it"))
    own = field_names(option_types[kind])
    foreign = sorted(set(options) - set(own))
    if foreign and not auto:
        where = ", ".join(f"{name!r} (an option of {' and '.join(owners[name])}"
                          + (f": {_WHY_NOT[kind, name]}" if (kind, name) in _WHY_NOT else "") + ")" for name in foreign)
        raise UnknownOptionError(with_fix(
            f"strategy {kind!r} does not take {where}; its options are: {', '.join(own)}",
            f"drop {', '.join(foreign)}, or use make_strategy('auto', ...), which checks every option "
            "and passes each backend only its own"))
    explicit_cluster = sorted(set(options) & CLUSTER_OPTIONS)
    if auto and explicit_cluster and not set(explicit_cluster) <= set(own):
        raise UnknownOptionError(with_fix(
            f"make_strategy('auto', {', '.join(f'{n}=...' for n in explicit_cluster)}): an explicit cluster "
            "says which backend you want, but auto picks one from the environment only (here "
            f"{kind!r}), which would drop it",
            "name the backend: make_strategy('parameter_server', cluster=..., ...)"))
    if auto:  # validate the other backends' options against their owners, then leave them out
        for backend, options_type in option_types.items():
            theirs = {k: v for k, v in options.items() if k in field_names(options_type)}
            if backend != kind and set(theirs) & set(foreign):
                options_type(**theirs)
    return option_types[kind](**{k: v for k, v in options.items() if k in own})
