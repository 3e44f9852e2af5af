"""PowerSGD's ``make_strategy`` options, checked one way on every backend that takes them (issue 38):
``horovod`` and ``multi_worker_mirrored``. Each backend's options dataclass has the fields
``compression``, ``powersgd_rank``, ``powersgd_start_iter`` and ``powersgd_min_compression_rate`` and
calls :func:`check_powersgd_options` from its ``__post_init__``."""
from __future__ import annotations

from typing import Any

from tfdist.errors import with_fix
from tfdist.runtime.lowrank import (DEFAULT_MIN_COMPRESSION_RATE, DEFAULT_RANK, DEFAULT_START_ITER,
                                    PowerSGDSettings)
from tfdist.strategies.options import OptionValueError, require_number

_DEFAULTS = (("powersgd_rank", DEFAULT_RANK), ("powersgd_start_iter", DEFAULT_START_ITER),
             ("powersgd_min_compression_rate", DEFAULT_MIN_COMPRESSION_RATE))


def check_powersgd_options(options: Any) -> None:
    """Raise ``OptionValueError`` naming the field unless ``options.compression`` is "none", "fp16" or
    "powersgd" and the ``powersgd_*`` options are valid and given only with ``compression="powersgd"``."""
    compression = options.compression
    if compression not in ("none", "fp16", "powersgd"):
        raise OptionValueError(with_fix(
            f"`compression` must be 'none', 'fp16' or 'powersgd', got {compression!r}",
            "compression='fp16' halves allreduce traffic, 'powersgd' sends low-rank factors; else leave it out"))
    require_number("powersgd_rank", options.powersgd_rank, minimum=1, integer=True)
    require_number("powersgd_start_iter", options.powersgd_start_iter, minimum=0, integer=True)
    require_number("powersgd_min_compression_rate", options.powersgd_min_compression_rate, minimum=0)
    given = [name for name, default in _DEFAULTS if getattr(options, name) != default]
    if given and compression != "powersgd":
        raise OptionValueError(with_fix(f"`{given[0]}` is PowerSGD's, and `compression` is {compression!r}",
                                        f"pass compression='powersgd' as well, or drop {given[0]}"))


def powersgd_settings(options: Any) -> PowerSGDSettings | None:
    """The :class:`PowerSGDSettings` of checked ``options``, or None without ``compression="powersgd"``."""
    if options.compression != "powersgd":
        return None
    return PowerSGDSettings(options.powersgd_rank, options.powersgd_start_iter, options.powersgd_min_compression_rate)
