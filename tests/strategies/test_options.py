"""The option rule of make_strategy, on stand-in option types: no TensorFlow needed."""
from __future__ import annotations

import dataclasses

import pytest

from tfdist.errors import TfdistError
from tfdist.strategies.options import (OptionValueError, StrategyOptions, UnknownOptionError, build_options,
                                       require_bool, require_number)


@dataclasses.dataclass(frozen=True)
class _Ring(StrategyOptions):
    compression: str = "none"
    warmup_epochs: float = 0

    def __post_init__(self) -> None:
        if self.compression not in ("none", "fp16"):
            raise OptionValueError(f"`compression` must be 'none' or 'fp16', got {self.compression!r}; fix: ...")
        require_number("warmup_epochs", self.warmup_epochs, minimum=0)


@dataclasses.dataclass(frozen=True)
class _Servers(StrategyOptions):
    shards: int | None = None

    def __post_init__(self) -> None:
        if self.shards is not None:
            require_number("shards", self.shards, minimum=1, integer=True)


TYPES = {"horovod": _Ring, "parameter_server": _Servers, "single": StrategyOptions}


def test_auto_checks_a_foreign_option_against_its_owner():
    """make_strategy("auto", compression="int8") on a single process used to pass."""
    with pytest.raises(OptionValueError, match="`compression` must be 'none' or 'fp16', got 'int8'"):
        build_options("single", {"compression": "int8"}, TYPES, auto=True)
    with pytest.raises(OptionValueError, match="`shards` must be an integer >= 1, got 0"):
        build_options("single", {"shards": 0}, TYPES, auto=True)


def test_auto_passes_the_chosen_backend_only_its_own_options():
    options = build_options("single", {"compression": "fp16", "shards": 2, "scale_lr": False}, TYPES, auto=True)
    assert options == StrategyOptions(scale_lr=False)
    options = build_options("horovod", {"compression": "fp16", "shards": 2}, TYPES, auto=True)
    assert options == _Ring(compression="fp16")


def test_a_named_backend_refuses_another_backends_option_and_names_the_owner():
    with pytest.raises(UnknownOptionError) as info:
        build_options("single", {"warmup_epochs": 2}, TYPES)
    message = str(info.value)
    assert "strategy 'single' does not take 'warmup_epochs' (an option of horovod)" in message
    assert "fix: drop warmup_epochs, or use make_strategy('auto', ...)" in message


def test_an_unknown_option_lists_every_backend_and_suggests_across_them():
    """`shards` on single used to suggest `shard_data`; the close match lives in another backend."""
    with pytest.raises(UnknownOptionError) as info:
        build_options("single", {"shard": 2}, TYPES)
    message = str(info.value)
    assert "unknown option(s) 'shard' (did you mean 'shards'?)" in message
    assert "horovod: scale_lr, compression, warmup_epochs" in message
    assert "parameter_server: scale_lr, shards" in message
    assert message.endswith("fix: correct the name, or drop it")


def test_unknown_names_are_errors_under_auto_too():
    with pytest.raises(UnknownOptionError, match="'compresion' \\(did you mean 'compression'\\?\\)"):
        build_options("single", {"compresion": "fp16"}, TYPES, auto=True)


def test_every_option_error_is_a_tfdist_error_and_keeps_its_builtin_base():
    assert issubclass(UnknownOptionError, TfdistError) and issubclass(UnknownOptionError, TypeError)
    assert issubclass(OptionValueError, TfdistError) and issubclass(OptionValueError, ValueError)


@pytest.mark.parametrize("value", [True, "1", None, -1, 0.5])
def test_require_number_rejects_non_integers_and_bools(value):
    with pytest.raises(OptionValueError, match="`n` must be an integer >= 0"):
        require_number("n", value, minimum=0, integer=True)


@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_require_bool_rejects_everything_but_bools(value):
    with pytest.raises(OptionValueError, match=f"`flag` must be True or False, got {value!r}; fix: pass flag=True"):
        require_bool("flag", value)
