"""The per-nest compile cache of the CPU target (lowering/cpu/units.py, object_cache.py):
a graph compiles only the loop nests no earlier graph compiled, and its shared object
computes what an uncached one does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import DEVICE, target_name
from loop_nests import bufferized_nests

from lazymlir import session
from lazymlir.lowering.cpu import codegen as cpu_codegen, object_cache as cpu_object_cache, \
    stages as cpu_pipeline, units as cpu_units
from lazymlir.targets.cpu import CpuExecutable

pytestmark = pytest.mark.skipif(target_name() != "cpu", reason="CPU code generation")

NESTS = 8  # (outline.MIN_NESTS: fewer stay in the entry)


def _llvm(adds: list[float]) -> str:
    """The llvm stage of `main(x, out)`: out = x * (NESTS + 1) + sum(adds), one nest
    per term (nest k adds x and adds[k])."""
    return str(cpu_pipeline.to_llvm(str(cpu_pipeline.to_loops(bufferized_nests(adds)))))


def _stored_keys(folder: Path) -> list[str]:
    keys = []
    for index in folder.glob(f"*{cpu_object_cache.INDEX_SUFFIX}"):
        keys += index.read_text().split("\n")[1:]
    return [key for key in keys if key]


def _build(adds: list[float], folder: Path, cache: Path) -> Path:
    folder.mkdir()
    return cpu_codegen.build_shared_object(_llvm(adds), folder, cache)


def _check(so: Path, adds: list[float]) -> None:
    x = torch.randn(256)
    (out,) = CpuExecutable(so, [((256,), torch.float32)]).run([x])
    torch.testing.assert_close(out, x * (len(adds) + 1) + sum(adds), rtol=1e-6, atol=1e-5)


@pytest.fixture
def cut_small_modules(monkeypatch):
    """Every module is cut into units (2 parts), as a large one is; llc's runs recorded."""
    monkeypatch.setattr(cpu_codegen, "SPLIT_MIN_BYTES", 1)
    monkeypatch.setattr(cpu_codegen, "ENTRY_APART_MIN_BYTES", 1)
    monkeypatch.setattr(cpu_codegen.os, "cpu_count", lambda: 2)
    runs = []
    real_run = cpu_codegen._run
    monkeypatch.setattr(cpu_codegen, "_run", lambda cmd: (runs.append(cmd), real_run(cmd)))
    def optimized() -> int:  # nest parts compiled (the entry is llc -O0) since last asked
        count = sum(1 for c in runs if c[0].endswith("llc") and c[1] == "-O3")
        runs.clear()
        return count
    return optimized


def test_a_second_graph_compiles_only_the_nests_it_does_not_share(tmp_path,
                                                                   cut_small_modules):
    cache = tmp_path / "objects"
    first = [float(k) for k in range(NESTS)]
    second = first[:-1] + [100.0]  # the last nest differs
    so = _build(first, tmp_path / "a", cache)
    _check(so, first)
    assert len(set(_stored_keys(cache))) == NESTS and cut_small_modules() == 2
    so = _build(second, tmp_path / "b", cache)
    _check(so, second)
    assert len(set(_stored_keys(cache))) == NESTS + 1  # one new unit
    assert cut_small_modules() == 1  # in one part
    # The first graph again (in a new process: its whole-graph cache entry is gone):
    # every nest from the cache, only the entry compiled.
    so = _build(first, tmp_path / "c", cache)
    _check(so, first)
    assert cut_small_modules() == 0 and len(set(_stored_keys(cache))) == NESTS + 1


def test_a_damaged_part_is_compiled_again(tmp_path, cut_small_modules):
    cache = tmp_path / "objects"
    adds = [float(k) for k in range(NESTS)]
    _build(adds, tmp_path / "a", cache)
    cut_small_modules()
    damaged, kept = sorted(cache.glob(f"*{cpu_object_cache.OBJECT_SUFFIX}"))
    damaged.write_bytes(damaged.read_bytes()[:100])  # truncated (a full disk, a short copy)
    so = _build(adds, tmp_path / "b", cache)
    _check(so, adds)
    assert cut_small_modules() >= 1  # that part's nests, compiled again
    assert kept.exists() and (not damaged.exists() or damaged.stat().st_size != 100)
    assert sorted(_stored_keys(cache)) == sorted(set(_stored_keys(cache)))


def test_unit_keys_ignore_the_names_a_module_chose():
    """The same nest under another name, reading a private global of another name, with
    other attribute group numbers, has the same key; another constant, another key."""
    def module(nest: str, message: str, group: int, bound: int) -> cpu_units.Module:
        text = (f'@{message} = private constant [3 x i8] c"ab\\00"\n'
                "declare void @puts(ptr)\n\n"
                f'define internal void @"main${nest}"(i64 %0) #{group} {{\n'
                f"  %2 = icmp slt i64 %0, {bound}\n  call void @puts(ptr @{message})\n"
                "  ret void\n}\n\n"
                "define void @_mlir_ciface_main(ptr %0) {\n"
                f'  call void @"main${nest}"(i64 1)\n  ret void\n}}\n\n'
                f"attributes #{group} = {{ noinline }}\n")
        cut = cpu_units.cut(text, "_mlir_ciface_")
        assert cut is not None and cut.roots == [f'"main${nest}"']
        return cut

    def key(cut: cpu_units.Module) -> str:
        return cpu_units.unit_key(cut, cut.roots[0], "salt")

    same = key(module("nest3", "assert_msg_0", 0, 7))
    assert key(module("nest9", "assert_msg_1", 4, 7)) == same
    assert key(module("nest3", "assert_msg_0", 0, 8)) != same
    public = "define void @kernel() {\n  ret void\n}\ndefine void @_mlir_ciface_main() {\n" \
             "  ret void\n}\n"
    assert cpu_units.cut("; m\n" + public, "_mlir_ciface_") is None  # not a nest: not cut


def test_the_device_keeps_nests_in_its_disk_cache(tmp_path, cut_small_modules):
    """The execution driver hands the compiler the disk cache's object folder: a graph's
    nests are there after its compile, and a graph sharing them compiles fewer."""
    current = session.reset()
    current.settings.cache_dir = str(tmp_path / "cache")
    current.settings.compile_worker = False  # (in-process: the patched sizes apply)
    try:
        weights = [torch.randn(16, 16) for _ in range(NESTS)]
        x = torch.randn(4, 16)

        def layers(count: int) -> torch.Tensor:
            y, expected = x.to(DEVICE), x
            for w in weights[:count]:
                y, expected = (y @ w.to(DEVICE)).relu(), (expected @ w).relu()
            torch.testing.assert_close(y.cpu(), expected, rtol=1e-5, atol=1e-5)

        layers(NESTS)
        (objects,) = (tmp_path / "cache").glob("v-*/objects-*")
        first, parts = len(_stored_keys(objects)), cut_small_modules()
        assert first > 0 and parts >= 1
        layers(NESTS - 1)  # another graph: the same nests but the last layer's
        assert cut_small_modules() < parts
    finally:
        session.reset()
