"""The registry: exact names, close-match errors (no TensorFlow)."""
from __future__ import annotations

import pytest

from tfdist.strategies.registry import StrategyRegistry, UnknownStrategyError


def _registry() -> StrategyRegistry:
    registry = StrategyRegistry()
    for name in ("single", "horovod", "multi_worker_mirrored"):
        registry.register(name, f"{name} backend")(type(name, (), {}))
    return registry


def test_unknown_name_lists_the_known_ones_and_the_closest():
    with pytest.raises(UnknownStrategyError) as info:
        _registry().get("horovd")
    message = str(info.value)
    assert "unknown strategy 'horovd'" in message
    assert "known strategies: auto, horovod, multi_worker_mirrored, single" in message
    assert "fix: did you mean 'horovod'?" in message


def test_no_substring_matching():
    with pytest.raises(UnknownStrategyError):
        _registry().get("mirrored")  # only multi_worker_mirrored is registered here


def test_double_registration_is_refused():
    registry = _registry()
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("single", "again")(type("X", (), {}))


def test_register_sets_the_kind():
    registry = _registry()
    assert registry.get("horovod").kind == "horovod"
