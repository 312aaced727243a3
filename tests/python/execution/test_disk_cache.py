"""The persistent compile cache: where it lives, what invalidates it, several processes
sharing it, pruning, and a second process that compiles nothing.

Fresh-process cases run the cpu target with only the LAZYMLIR_* settings they name
and XDG_CACHE_HOME/HOME pointing into tmp_path (never the user's real cache).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from conftest import DEVICE

import lazymlir
from lazymlir import session
from lazymlir.execution import disk_cache, executor, partition
from lazymlir.execution import worker as worker_module
from lazymlir.lowering import errors as lowering_errors
from lazymlir.support import settings as settings_module
from lazymlir.support.settings import cache_dir_from, default_cache_dir
from lazymlir.tracing import values

# Three graphs (two shapes of one step, and another op mix): each process prints its
# results and what it compiled.
_SCRIPT = textwrap.dedent("""
    import json, warnings, torch, lazymlir
    warnings.simplefilter("always")
    results = []
    for rows in (2, 3):
        x = torch.arange(rows * 4, dtype=torch.float32).reshape(rows, 4).to("lazy_mlir")
        results.append((x * 3 + 1).relu().sum(1).cpu().tolist())
    y = torch.linspace(-1, 1, 6).reshape(2, 3).to("lazy_mlir")
    results.append((y.exp() - y.tanh()).amax(0).cpu().tolist())
    c = lazymlir.metrics.counters()
    print(json.dumps({"results": results, "uncached": c.get("UncachedCompile", 0),
                      "disk_hits": c.get("DiskCacheHit", 0),
                      "worker_starts": c.get("CompileWorkerStart", 0),
                      "report": lazymlir.metrics.report().splitlines()[-2]}))
""")


def _expected() -> list:
    out = []
    for rows in (2, 3):
        x = torch.arange(rows * 4, dtype=torch.float32).reshape(rows, 4)
        out.append((x * 3 + 1).relu().sum(1).tolist())
    y = torch.linspace(-1, 1, 6).reshape(2, 3)
    out.append((y.exp() - y.tanh()).amax(0).tolist())
    return out


def _env(tmp_path: Path, **env) -> dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    full.update(LAZYMLIR_TARGET="cpu", XDG_CACHE_HOME=str(tmp_path / "xdg"),
                HOME=str(tmp_path / "home"))
    full.update(env)
    return full


def _start(tmp_path: Path, **env) -> subprocess.Popen:
    script = tmp_path / "graphs.py"
    script.write_text(_SCRIPT)
    return subprocess.Popen([sys.executable, str(script)], env=_env(tmp_path, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.splitlines()[-1])
    for actual, expected in zip(result["results"], _expected(), strict=True):
        torch.testing.assert_close(torch.tensor(actual), torch.tensor(expected))
    return result, err


def _run(tmp_path: Path, **env) -> tuple[dict, str]:
    return _finish(_start(tmp_path, **env))


def _entries(cache: Path) -> list[Path]:
    (version,) = [v for v in cache.iterdir() if v.name.startswith("v-")]
    return [p for p in version.iterdir() if p.name != disk_cache.VERDICTS]


# ------------------------------------------------------------- location


def test_default_location_follows_xdg_home_override_and_off(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == str(tmp_path / "xdg" / "lazymlir")
    assert cache_dir_from(None) == cache_dir_from("") == default_cache_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # ignored (XDG base dir rule)
    assert default_cache_dir() == str(tmp_path / "home" / ".cache" / "lazymlir")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == str(tmp_path / "home" / ".cache" / "lazymlir")
    assert cache_dir_from("~/elsewhere") == str(tmp_path / "home" / "elsewhere")
    assert cache_dir_from("/some/folder") == "/some/folder"
    assert cache_dir_from("off") is None and cache_dir_from(" OFF ") is None
    assert cache_dir_from("./off") == "./off"  # a folder named off
    monkeypatch.setenv("LAZYMLIR_CACHE_DIR", "off")
    assert settings_module.from_env().cache_dir is None
    monkeypatch.delenv("LAZYMLIR_CACHE_DIR")
    assert settings_module.from_env().cache_dir == default_cache_dir()


def test_second_process_compiles_nothing_with_the_default_cache(tmp_path):
    """No LAZYMLIR_CACHE_DIR: the cache is on, under XDG_CACHE_HOME; the second process
    loads every graph from disk and never starts a compile worker."""
    first, _ = _run(tmp_path)
    assert first["uncached"] == 3 and first["disk_hits"] == 0, first
    assert first["worker_starts"] == 1, first  # started early: the cache was empty
    cache = tmp_path / "xdg" / "lazymlir"
    assert str(cache) in first["report"], first
    assert len(_entries(cache)) == 3
    second, _ = _run(tmp_path)
    assert second["uncached"] == 0 and second["disk_hits"] == 3, second
    assert second["worker_starts"] == 0, second
    assert not (tmp_path / "home").exists()  # nothing written outside the cache folder


# ------------------------------------------------------------- sharing


def test_two_processes_fill_one_fresh_cache_at_once(tmp_path):
    """Both compile the same graphs at the same time into one empty folder: both right,
    every entry complete, no staging folder left (a later process loading them is
    test_second_process_compiles_nothing_with_the_default_cache)."""
    cache = tmp_path / "shared"
    procs = [_start(tmp_path, LAZYMLIR_CACHE_DIR=str(cache)) for _ in range(2)]
    for proc in procs:
        _finish(proc)
    entries = _entries(cache)
    assert len(entries) == 3 and not [p for p in entries if p.name.startswith(".")], entries
    target = lazymlir.targets.active()
    if target.name == "cpu":  # the children ran the cpu target
        assert all(target.is_complete(p) for p in entries)


def _complete(entry: Path) -> bool:
    """A fake artifact is complete if its two files hold the same payload."""
    try:
        return (entry / "a").read_text() == (entry / "b").read_text() != ""
    except OSError:  # removed while being checked: a miss
        return False


def _writer(base: str, rounds: int) -> None:
    cache = disk_cache.DiskCache(base, 1 << 30, version="test")
    cache.root.mkdir(parents=True, exist_ok=True)
    artifact = Path(base) / f"artifact-{os.getpid()}"
    artifact.mkdir()
    for i in range(rounds):
        payload = f"{os.getpid()}-{i}" * 2000
        (artifact / "a").write_text(payload)
        (artifact / "b").write_text(payload)
        entry = cache.entry(f"k{i % 5}", "fp")
        cache.save(entry, artifact, f"graph {i % 5}")
        cache.store_verdict("v", payload if i % 2 else None)
        if i % 3 == 0:  # make room: another writer's entry may be read meanwhile
            disk_cache._remove(entry)


def test_readers_never_see_half_an_entry_or_verdict(tmp_path):
    """Two writer processes store, replace and remove entries and verdicts under the
    same keys while this process reads: every read is a miss or a whole entry."""
    base = str(tmp_path / "cache")
    reader = disk_cache.DiskCache(base, 1 << 30, version="test")
    # fork: the writers only touch files (spawn would import torch twice, seconds each)
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_writer, args=(base, 150)) for _ in range(2)]
    for writer in writers:
        writer.start()
    hits = 0
    while any(w.is_alive() for w in writers):
        for k in range(5):
            found = reader.load(reader.entry(f"k{k}", "fp"), f"graph {k}", _complete)
            hits += found is not None
        ok, verdict = reader.verdict("v")
        if ok and verdict is not None:  # a whole verdict, not the start of one
            assert verdict == verdict[:len(verdict) // 2000] * 2000, len(verdict)
    for writer in writers:
        writer.join()
        assert writer.exitcode == 0
    assert hits > 0
    leftovers = [p for p in reader.root.iterdir() if p.name.startswith(".")]
    assert leftovers == [], leftovers


# ------------------------------------------------------------- invalidation


def _graph():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4).to(DEVICE)
    return ((x - 5).abs() * 0.5).cumsum(1).cpu()


@pytest.fixture
def fresh_disk_session(tmp_path):
    """A session whose disk cache is a fresh folder; the suite's session after."""
    def fresh(worker: bool = False):
        current = session.reset()
        current.settings.cache_dir = str(tmp_path / "cache")
        current.settings.compile_worker = worker  # in-process: no worker start per session
        return current
    yield fresh
    session.reset()


def test_pipeline_or_target_change_is_a_miss(fresh_disk_session, monkeypatch):
    expected = _graph().clone()
    fresh_disk_session()
    torch.testing.assert_close(_graph(), expected)
    assert lazymlir.metrics.counter("UncachedCompile") == 1
    fresh_disk_session()
    _graph()
    assert lazymlir.metrics.counter("DiskCacheHit") == 1
    assert lazymlir.metrics.counter("UncachedCompile") == 0
    # Another compiler version (a changed lowering source, a new torch-mlir): a miss.
    monkeypatch.setattr(disk_cache, "compiler_version", lambda: "0123456789ab")
    fresh_disk_session()
    torch.testing.assert_close(_graph(), expected)
    assert lazymlir.metrics.counter("UncachedCompile") == 1
    monkeypatch.undo()
    # Another target fingerprint (another host CPU, CUDA chip or runtime): a miss.
    current = fresh_disk_session()
    target = lazymlir.targets.active()
    monkeypatch.setattr(type(target), "fingerprint", lambda self: "another-machine")
    torch.testing.assert_close(_graph(), expected)
    assert current.metrics.counter("UncachedCompile") == 1
    assert current.metrics.counter("DiskCacheHit") == 0


def test_compiler_version_covers_sources_and_packages(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    (root / "stage.py").write_text("PASSES = ['a']\n")
    before = disk_cache._digest([root], ("torch",))
    assert disk_cache._digest([root], ("torch",)) == before
    (root / "stage.py").write_text("PASSES = ['b']\n")
    assert disk_cache._digest([root], ("torch",)) != before
    assert disk_cache._digest([root], ("torch", "no-such-package")) != \
        disk_cache._digest([root], ("torch",))
    # Every folder whose sources change what an artifact holds or how it is loaded.
    version = disk_cache.compiler_version()
    assert len(version) == 12 and version == disk_cache.compiler_version()


def test_dumping_compiles_even_when_the_disk_cache_holds_the_graph(fresh_disk_session,
                                                                   tmp_path):
    fresh_disk_session()
    _graph()
    fresh_disk_session()
    with lazymlir.dump_to(tmp_path / "dump"):
        _graph()
    assert lazymlir.metrics.counter("UncachedCompile") == 1  # compiled, so dumped
    (folder,) = list((tmp_path / "dump").iterdir())
    assert (folder / "manifest.json").exists()


def test_interrupted_write_is_never_used_and_is_pruned(tmp_path):
    cache = disk_cache.DiskCache(tmp_path / "cache", 1 << 30, version="test")
    cache.root.mkdir(parents=True)
    entry = cache.entry("key", "fp")
    staging = cache.root / f".{entry.name}-dead"  # a writer killed before its rename
    staging.mkdir()
    (staging / "a").write_text("x")
    assert cache.load(entry, "graph", _complete) is None
    entry.mkdir()  # a folder without its graph file (not made by save): in the way
    assert cache.load(entry, "graph", _complete) is None and not entry.exists()
    old = time.time() - disk_cache.STALE_STAGING_S - 10
    os.utime(staging, (old, old))
    cache.prune()
    assert not staging.exists()


# ------------------------------------------------------------- pruning


def _fake_entry(cache: disk_cache.DiskCache, key: str, size: int, age_s: float) -> Path:
    entry = cache.entry(key, "fp")
    entry.mkdir(parents=True)
    (entry / "a").write_bytes(b"x" * size)
    stamp = time.time() - age_s
    os.utime(entry, (stamp, stamp))
    return entry


def test_prune_keeps_the_cache_under_its_cap_least_recently_used_first(tmp_path):
    base = tmp_path / "cache"
    cache = disk_cache.DiskCache(base, max_bytes=14_000, version="current")
    old = [_fake_entry(cache, f"old{i}", 3000, 1000 + i) for i in range(3)]
    new = [_fake_entry(cache, f"new{i}", 3000, i) for i in range(2)]
    other = disk_cache.DiskCache(base, 1 << 30, version="stale")
    _fake_entry(other, "gone", 10, 0)
    stale = time.time() - (disk_cache.STALE_VERSION_DAYS + 1) * 86400
    os.utime(other.root, (stale, stale))
    recent = disk_cache.DiskCache(base, 1 << 30, version="recent")  # another install
    kept = _fake_entry(recent, "kept", 10, 0)
    cache.prune()
    assert not other.root.exists()
    assert kept.exists()
    assert all(p.exists() for p in new)
    # 15,010 bytes > 14,000: the least recently used go until 80% of the cap is left
    assert [p for p in old if p.exists()] == old[:1]


def test_prune_takes_object_parts_one_by_one_with_the_entries(tmp_path):
    """The cpu target's shared object parts (lowering/cpu/object_cache.py) count in the
    cap and go least recently used first, each .o with its index; a dead writer's
    temporary file goes too."""
    cache = disk_cache.DiskCache(tmp_path / "cache", max_bytes=10_000, version="current")
    objects = cache.objects("fp")
    objects.mkdir(parents=True)
    parts = []
    for i, age in enumerate((3000, 2000, 10)):
        part = objects / f"part{i}.o"
        part.write_bytes(b"x" * 2900)
        (objects / f"part{i}.units").write_text("100 sha\nkey\n")
        os.utime(part, (time.time() - age, time.time() - age))
        parts.append(part)
    dead = objects / ".part9.o.123"
    dead.write_bytes(b"x")
    os.utime(dead, (time.time() - disk_cache.STALE_STAGING_S - 10,) * 2)
    assert not cache.has_entries()  # (object code alone does not make a warm cache)
    entry = _fake_entry(cache, "graph", 3000, 1000)
    cache.prune()
    assert [p.exists() for p in parts] == [False, False, True]
    assert not (objects / "part0.units").exists() and (objects / "part2.units").exists()
    assert entry.exists() and not dead.exists()


def test_cache_max_mb_setting(monkeypatch):
    monkeypatch.setenv("LAZYMLIR_CACHE_MAX_MB", "64")
    assert settings_module.from_env().cache_max_mb == 64
    monkeypatch.setenv("LAZYMLIR_CACHE_MAX_MB", "0")
    with pytest.raises(ValueError, match="LAZYMLIR_CACHE_MAX_MB"):
        settings_module.from_env()


def test_warm_cache_does_not_prestart_the_worker(fresh_disk_session, monkeypatch):
    started = []
    monkeypatch.setattr(worker_module.CompileWorker, "start", lambda self: started.append(self))
    fresh_disk_session(worker=True)
    executor.prestart_worker()
    assert len(started) == 1  # an empty cache: the worker starts while the user traces
    fresh_disk_session()
    _graph()
    fresh_disk_session(worker=True)
    executor.prestart_worker()
    assert len(started) == 1  # a warm cache: it starts at the first miss, if any
    current = fresh_disk_session(worker=True)
    current.settings.cache_dir = None  # off
    executor.prestart_worker()
    assert len(started) == 2


def test_a_training_graph_prestarts_two_workers(fresh_disk_session, monkeypatch):
    """The forward and the backward of a training graph compile at once: both workers
    start (and warm up) while AOTAutograd traces, not the second at the backward's
    request. Never more than the pool's size, never again once started."""
    started = []
    monkeypatch.setattr(worker_module.CompileWorker, "start", lambda self: started.append(self))
    current = fresh_disk_session(worker=True)
    current.settings.compile_workers = 2
    executor.prestart_worker()
    assert len(started) == 1
    executor.prestart_worker(workers=2)
    assert current.worker.started == 2 and len({id(w) for w in started}) == 2
    executor.prestart_worker(workers=2)
    executor.prestart_worker()
    assert current.worker.started == 2
    current = fresh_disk_session(worker=True)
    current.settings.compile_workers = 1
    executor.prestart_worker(workers=2)
    assert current.worker.started == 1


def test_cache_off_writes_nothing(fresh_disk_session, tmp_path):
    current = fresh_disk_session()
    current.settings.cache_dir = None  # what LAZYMLIR_CACHE_DIR=off gives
    _graph()
    assert current.metrics.counter("UncachedCompile") == 1
    assert current.disk_cache == (None, None) and not (tmp_path / "cache").exists()
    assert "disk cache: off" in lazymlir.metrics.report()


def test_unwritable_cache_folder_warns_once_and_runs(fresh_disk_session, tmp_path):
    """The default folder (or LAZYMLIR_CACHE_DIR) cannot be created: one warning, then
    the program runs without a disk cache (a subprocess case with LAZYMLIR_CACHE_DIR is
    in test_cache_robustness.py)."""
    blocker = tmp_path / "a-file"  # folders below a file cannot be created, even by root
    blocker.write_text("")
    current = fresh_disk_session()
    current.settings.cache_dir = str(blocker / "lazymlir")
    with pytest.warns(UserWarning, match="cannot be used") as caught:
        first = _graph()
        (torch.ones(5).to(DEVICE) * 4).cpu()  # a second graph: no second warning
    assert len([w for w in caught if "cannot be used" in str(w.message)]) == 1
    torch.testing.assert_close(first, ((torch.arange(12.0).reshape(3, 4) - 5).abs() * 0.5)
                               .cumsum(1))
    assert current.metrics.counter("UncachedCompile") == 2
    assert "not writable" in lazymlir.metrics.report()


# ------------------------------------------------------------- reproducers


def test_reproducers_go_to_one_capped_folder(monkeypatch, tmp_path):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(lowering_errors, "MAX_REPROS", 3)
    paths = [lowering_errors.save_repro("linalg", f"text {i}", "mlir") for i in range(5)]
    folder = lowering_errors.default_repro_dir()
    assert folder.parent == tmp_path and all(Path(p).parent == folder for p in paths)
    assert sorted(p.name for p in folder.iterdir()) == sorted(Path(p).name for p in paths[2:])
    assert Path(paths[-1]).read_text() == "text 4"
    explicit = lowering_errors.save_repro("fx", "graph", "fx.json", str(tmp_path / "mine"))
    assert Path(explicit).parent == tmp_path / "mine"


# ------------------------------------------------------------- probe verdicts


def test_probe_verdicts_persist_but_crashes_do_not(fresh_disk_session, monkeypatch):
    from lazymlir.support.errors import CompilerCrashError
    from lazymlir.tracing.graph import build_graph

    x = torch.ones(3).to(DEVICE)
    inner = [values.value_of(values.inner(t)) for t in (x.sin(), x.cos())]
    graph = build_graph(inner)[0]
    sin, cos = (partition.single_node_graph(graph, i) for i in range(2))
    probes = []

    def fake_probe(current, kind, payload):
        probes.append(kind)
        if '"aten.cos.default"' in payload["fx_text"]:
            raise CompilerCrashError("killed by SIGKILL", stage="linalg", target="cpu")
        return "stage 'linalg': does not lower"

    monkeypatch.setattr(executor, "_worker_request", fake_probe)
    for _ in range(2):  # two processes' sessions
        current = fresh_disk_session()
        target = lazymlir.targets.active()
        assert executor._verdict(current, target, sin) == "stage 'linalg': does not lower"
        assert "SIGKILL" in executor._verdict(current, target, cos)
        assert executor._verdict(current, target, cos) is not None  # in memory now
    # sin probed once (then read from disk); the crash probed again in the next session
    assert probes == ["probe", "probe", "probe"], probes
