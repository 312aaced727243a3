"""The disk cache and the dump folder under damage: never a crash, never a wrong
result, never a lost result; each case in a fresh process (as users meet them)."""

from __future__ import annotations

from pathlib import Path

from conftest import run_tiny_script


def _run(tmp_path, **env):
    lines, stderr = run_tiny_script(tmp_path, **env)
    return lines[1], stderr


def _version_dir(cache: Path) -> Path:
    """Entries live under a folder per compiler version (sources + tool versions)."""
    (version,) = [p for p in cache.iterdir() if p.name != "runtime"]  # runtime: cpu_alloc.py
    assert version.name.startswith("v-"), version
    return version


def _entry(cache: Path) -> Path:
    (entry,) = [p for p in _version_dir(cache).iterdir()
                if p.is_dir() and not p.name.startswith(".") and p.name != "verdicts"]
    return entry


def test_truncated_executable_is_recompiled(tmp_path):
    cache = tmp_path / "cache"
    assert _run(tmp_path, LAZYMLIR_CACHE_DIR=str(cache))[0] == "COUNTERS 0 1"
    so = _entry(cache) / "executable.so"
    so.write_bytes(so.read_bytes()[:100])  # a full disk, a killed copy
    counters, stderr = _run(tmp_path, LAZYMLIR_CACHE_DIR=str(cache))
    assert counters == "COUNTERS 0 1", counters
    assert "damaged" in stderr
    assert _run(tmp_path, LAZYMLIR_CACHE_DIR=str(cache))[0] == "COUNTERS 1 0"


def test_entry_of_another_graph_is_not_used(tmp_path):
    cache = tmp_path / "cache"
    _run(tmp_path, LAZYMLIR_CACHE_DIR=str(cache))
    graph = _entry(cache) / "graph.fx.json"
    graph.write_text(graph.read_text().replace("aten.relu.default", "aten.abs.default"))
    counters, stderr = _run(tmp_path, LAZYMLIR_CACHE_DIR=str(cache))
    assert counters == "COUNTERS 0 1", counters
    assert "belongs to another graph" in stderr


def test_unwritable_cache_and_dump_dirs_warn_and_keep_the_result(tmp_path):
    blocker = tmp_path / "a-file"  # folders below a file cannot be created, even by root
    blocker.write_text("")
    counters, stderr = _run(tmp_path, LAZYMLIR_CACHE_DIR=str(blocker / "cache"),
                            LAZYMLIR_DUMP_DIR=str(blocker / "dump"))
    assert counters == "COUNTERS 0 1"
    assert "LAZYMLIR_CACHE_DIR" in stderr and "LAZYMLIR_DUMP_DIR" in stderr, stderr
