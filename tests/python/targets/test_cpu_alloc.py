"""The CPU target's caching allocator for compiled graphs' temporaries (targets/cpu_alloc.py).

The library is exercised directly in child processes (native code: a bug must not take
the test session down), then through the device: a graph run twice reuses the blocks
its first run freed, with eager's values.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import DEVICE, assert_no_fallback, target_name

import lazymlir
from lazymlir.targets import cpu_alloc

pytestmark = pytest.mark.skipif(target_name() != "cpu", reason="the cpu target's allocator")

# Calls the library's C functions from a child process; prints the allocator's stats.
_CHILD = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib._mlir_memref_to_llvm_alloc.restype = ctypes.c_void_p
lib._mlir_memref_to_llvm_alloc.argtypes = [ctypes.c_uint64]
lib._mlir_memref_to_llvm_aligned_alloc.restype = ctypes.c_void_p
lib._mlir_memref_to_llvm_aligned_alloc.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
lib._mlir_memref_to_llvm_free.argtypes = [ctypes.c_void_p]
alloc, aligned, free = (lib._mlir_memref_to_llvm_alloc, lib._mlir_memref_to_llvm_aligned_alloc,
                        lib._mlir_memref_to_llvm_free)
def stats():
    out = (ctypes.c_uint64 * 4)()
    lib.lazymlir_cpu_alloc_stats(ctypes.byref(out))
    return list(out)
"""


def _run_child(tmp_path, body: str, **env) -> str:
    library = cpu_alloc.build(tmp_path)
    code = _CHILD + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code, str(library)], capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **env})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_big_blocks_are_reused_small_ones_are_not(tmp_path):
    out = _run_child(tmp_path, """
        big = alloc(1 << 20)
        ctypes.memset(big, 7, 1 << 20)            # the whole block is usable
        free(big)
        again = alloc((1 << 20) - 4096)           # same size class: the same block
        assert again == big, (again, big)
        print("after reuse", stats())
        small = alloc(1000)
        free(small)
        print("after small", stats())
        other = alloc(3 << 20)                    # another class: a fresh block
        assert other != big
        for p in (again, other):
            assert p % 64 == 0, p
            free(p)
        print("end", stats())
        """)
    lines = dict(line.split(" [") for line in out.strip().splitlines())
    hits, misses, cached, in_use = (int(v) for v in lines["after reuse"].rstrip("]").split(","))
    assert (hits, misses, cached, in_use) == (1, 1, 0, 1 << 20)
    assert lines["after small"] == lines["after reuse"]  # small blocks bypass the cache
    hits, misses, cached, in_use = (int(v) for v in lines["end"].rstrip("]").split(","))
    assert (hits, misses, in_use) == (1, 2, 0)
    assert cached == (1 << 20) + (3 << 20)


def test_alignment_and_the_cap(tmp_path):
    _run_child(tmp_path, """
        lib.lazymlir_cpu_alloc_set_cap_mb.argtypes = [ctypes.c_uint64]
        lib.lazymlir_cpu_alloc_set_cap_mb(0)  # what LAZYMLIR_CPU_ALLOC_CACHE_MB=0 sets
        p = aligned(4096, 200000)                 # over-aligned: served, not cached
        assert p % 4096 == 0, p
        ctypes.memset(p, 1, 200000)
        free(p)
        q = aligned(32, 1 << 20)
        assert q % 64 == 0
        free(q)
        hits, misses, cached, in_use = stats()
        assert cached == 0 and in_use == 0, stats()   # the cap is 0: nothing kept
        lib.lazymlir_cpu_alloc_trim()
        """)


def test_trim_returns_what_is_cached(tmp_path):
    _run_child(tmp_path, """
        blocks = [alloc(n << 16) for n in range(1, 20)]
        for p in blocks:
            free(p)
        assert stats()[2] > 0
        lib.lazymlir_cpu_alloc_trim()
        assert stats()[2] == 0, stats()
        """)


def test_a_graph_reuses_its_temporaries_across_runs():
    torch.manual_seed(0)
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def step(x, y):
        # Temporaries of 256 KiB (x @ y, the relu) that the graph frees itself.
        return ((x @ y).relu() @ y).sum(0)

    expected = step(a, b)
    la, lb = a.to(DEVICE), b.to(DEVICE)
    first = step(la, lb).cpu()
    before = lazymlir.metrics.counters()
    from lazymlir.targets import cpu
    stats_before = cpu.temporaries_stats()
    second = step(la, lb).cpu()
    stats_after = cpu.temporaries_stats()
    torch.testing.assert_close(first, expected, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(second, expected, rtol=1e-4, atol=1e-3)
    assert_no_fallback()
    assert lazymlir.metrics.counters().get("UncachedCompile", 0) == \
        before.get("UncachedCompile", 0)  # the same plan ran again
    assert stats_after["hits"] > stats_before["hits"], (stats_before, stats_after)
    assert stats_after["misses"] == stats_before["misses"], (stats_before, stats_after)
    assert "compiled graphs' temporaries" in lazymlir.metrics.report()


def test_the_cap_setting_reaches_the_allocator():
    """LAZYMLIR_CPU_ALLOC_CACHE_MB is read with the other settings and applied when the
    cpu target loads the allocator: with 0, a graph's freed temporaries are not kept."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    env.update(LAZYMLIR_TARGET="cpu", LAZYMLIR_CPU_ALLOC_CACHE_MB="0", LAZYMLIR_CACHE_DIR="off")
    code = textwrap.dedent("""
        import torch, lazymlir
        from lazymlir.targets import cpu
        assert lazymlir.config.settings().cpu_alloc_cache_mb == 0
        a = torch.randn(256, 256, device="lazy_mlir")
        for _ in range(2):
            ((a @ a).relu() @ a).sum(0).cpu()
        stats = cpu.temporaries_stats()
        assert stats["hits"] == 0 and stats["misses"] > 0, stats
        """)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
