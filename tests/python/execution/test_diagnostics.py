"""Recompile and fallback diagnostics: lazymlir/execution/diagnostics.py.

With debug on, each compile logs its cause against the nearest graph compiled
before, its hash, sizes and the user's line; each fallback logs its reason;
compiles that keep happening across mark_steps are warned about.
"""

from __future__ import annotations

import logging

import pytest
import torch

import lazymlir
from conftest import DEVICE
from lazymlir import config
from lazymlir.support import settings as settings_module


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def debug_log():
    lazymlir.session.reset()  # no graph of another test is "nearest"
    handler = _Records()
    logger = logging.getLogger("lazymlir.debug")
    logger.addHandler(handler)
    lazymlir.debug()
    yield handler.messages
    lazymlir.debug(False)
    logger.removeHandler(handler)


def _compiles(messages):
    # "disk cache load #n" where LAZYMLIR_CACHE_DIR already holds the graph
    return [m for m in messages if m.startswith(("lazymlir: compile #",
                                                 "lazymlir: disk cache load #"))]


def test_shape_change_is_named_with_hash_sizes_and_line(debug_log):
    for rows in (4, 4, 8):
        (torch.ones(rows, 3).to(DEVICE) * 2).relu().sum(0).cpu()
    first, second = _compiles(debug_log)  # rows=4 twice compiles once
    assert "cause: new graph" in first
    assert "cause: input 0 shape [4, 3] -> [8, 3] (dim 0: 4 -> 8)" in second
    assert "3 nodes, 1 inputs, 0 scalars, 1 outputs" in second
    assert "test_diagnostics.py:" in second and "in test_shape_change" in second
    key = first.split("graph ")[1].split(" ")[0]
    assert f"(vs graph {key})" in second


def test_integer_constant_and_dtype_changes_are_named(debug_log):
    x = torch.arange(4).to(DEVICE)
    (x + 2).cpu()
    (x + 3).cpu()
    (torch.arange(4, dtype=torch.int32).to(DEVICE) + 3).cpu()
    compiles = _compiles(debug_log)
    assert "node 0 (aten.add.Tensor) argument 1: 2 -> 3" in compiles[1], compiles
    assert "input 0 dtype int64 -> int32" in compiles[2], compiles


def test_fallback_is_logged_with_its_reason(debug_log):
    with pytest.warns(UserWarning, match="aten::nonzero"):
        torch.nonzero(torch.tensor([0.0, 1.0, 2.0]).to(DEVICE))
    fallbacks = [m for m in debug_log if "fallback: aten::nonzero" in m]
    assert len(fallbacks) == 1 and "runs eagerly on CPU: " in fallbacks[0], debug_log


def test_compiles_across_mark_steps_are_warned_about():
    lazymlir.session.reset()
    handler = _Records()
    logger = logging.getLogger("lazymlir.debug")
    logger.addHandler(handler)
    try:
        kept = []
        for rows in range(1, 8):  # a new shape every step: a new graph every step
            kept.append(torch.ones(rows, 2).to(DEVICE) + 1)
            lazymlir.mark_step()
    finally:
        logger.removeHandler(handler)
    warnings = [m for m in handler.messages if "compiles in the last 10 mark_steps" in m]
    assert len(warnings) == 1, handler.messages  # once per window, not every step
    assert warnings[0].startswith("lazymlir: 5 compiles")


def test_report_has_counters_timer_percentiles_fallbacks_and_cache():
    x = torch.randn(4, 4).to(DEVICE)
    for _ in range(3):
        (x @ x).sum().cpu()
    with pytest.warns(UserWarning):
        torch.nonzero(x).cpu()
    report = lazymlir.metrics.report()
    for text in ("Counters:", "CachedCompile", "p50=", "p99=", "ExecuteTime",
                 "Fallback ops (ran eagerly on CPU):", "aten::nonzero", "Graph cache: ",
                 "Device memory: "):
        assert text in report, report
    timer = lazymlir.metrics.timers()["ExecuteTime"]
    assert timer["count"] >= 3 and 0 < timer["p50_s"] <= timer["max_s"] <= timer["total_s"]


def test_debug_setting_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("LAZYMLIR_DEBUG", "1")
    assert settings_module.from_env().debug is True
    monkeypatch.setenv("LAZYMLIR_DEBUG", "maybe")
    with pytest.raises(ValueError, match="LAZYMLIR_DEBUG"):
        settings_module.from_env()
    assert config.settings().debug is False
