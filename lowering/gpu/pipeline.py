"""CUDA lowering: `bufferized` -> `gpu` -> `nvvm` -> `ptx` / `cubin`.

Plain functions over upstream `mlir.ir.Module` objects (the `xtc-mlir-python-bindings`
build of LLVM 22, which has the NVPTX target); the stage registry calls them.

Route (chosen because every step exists as a registered pass or a small Python rewrite
in this LLVM 22 build, and it yields correct PTX for every sample graph):

0. Python: runs of row ops over the same rows (softmax, log_softmax, layer_norm: row
   reductions and row maps) become one kernel, one block per row, the row in registers
   (`kernels/row_fusion.py`).
1. `linalg-generalize-named-ops`: matmul/fill/transpose become `linalg.generic`, so the
   Python rewrites below only ever see one op kind.
2. Python: iteration dims of every generic are permuted so that parallel dims come first.
   `convert-linalg-to-parallel-loops` only puts the *outermost* run of parallel dims in an
   `scf.parallel`; a reduction dim in front would leave a host-side `scf.for` around it.
3. Python: f16/bf16 contractions with M, N >= 16 become the tensor-core (WMMA) kernel
   of `kernels/mma.py`; f32 contractions (matmul, batch matmul, transposed operands) with
   M, N >= 32 become the shared-memory tiled kernel of `kernels/matmul.py`. Reductions over
   contiguous rows (the innermost input dim is reduced: row sums/max/mean,
   softmax/layer_norm statistics, full reductions) become one block per row (or per row
   slice) with a shared-memory tree (`kernels/row_reduce.py`). Of the rest, reductions
   whose parallel extent is small (full reductions above all) are split: `scf.parallel` over (kept
   dims, chunk), each thread folds one chunk serially in a register, then combines it
   into the output with one `memref.atomic_rmw` (two-level scheme: no identity element
   is needed, the output was initialised by the preceding fill). Other reductions stay
   parallel over the kept dims, serial over the reduced ones.
4. `convert-linalg-to-parallel-loops`.
5. Python: each top-level `scf.parallel` is linearised into one 2-d loop
   (block, thread) with an explicit `gpu.loop_dim_map` mapping (block_x, thread_x) and a
   bound guard. One linear index with the innermost dim fastest gives coalesced accesses
   and a block size chosen per loop (`min(block_size, N)`), which neither the global
   `scf-parallel-loop-tiling` sizes nor `gpu-map-parallel-loops` (dim 0 -> x) offer.
   Elementwise loops whose accesses are contiguous and 16-byte aligned in groups of 4
   give each thread 4 consecutive elements through `vector.load`/`vector.store`
   (`kernels/vectorize.py`; the nvvm stage marks the pointer arguments `.align 16`).
6. `convert-parallel-loops-to-gpu`, `gpu-kernel-outlining` (see `GPU_PIPELINE`).

Transposes feeding matmuls or elementwise ops were folded into their consumers'
indexing maps before bufferization (`transpose_folding.py`): no copy kernel.

Shared memory is used by row reductions, fused row runs and float matmuls with M and
N >= 32 (`kernels/matmul.py`: 128x128 tiles through shared memory, 8x8 register tiles,
FMA); smaller matmuls stay one thread per output element. f16/bf16 matmuls with M and
N >= 16 use tensor cores (`kernels/mma.py`: WMMA fragments from shared-memory tiles).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from mlir import ir, passmanager
from mlir.dialects import gpu

from .ir import GpuLoweringError, gpu_modules, host_func
from .kernels.reductions import split_reductions
from .kernels.host_loops import parallelize_host_loops, parallelize_overwrites, serial_kernels
from .kernels.matmul import tile_matmuls
from .kernels.mma import align_fragment_memory, tile_mma_matmuls
from .kernels.row_fusion import fuse_row_runs
from .kernels.row_reduce import row_reductions
from .kernels.vectorize import align_kernel_params
from .loop_mapping import fills_to_memset, interchange_parallel_first, map_host_loops, \
    wrap_serial_generics
from ..half_conversions import split_double_to_half
from ..mlir_runner import walk


@dataclass
class GpuOptions:
    """Knobs of the CUDA lowering. `options` arguments may also be a dict or None."""

    chip: str = "sm_90"
    block_size: int = 256
    # PTX ISA feature; empty = the minimum the chip needs (LLVM's default for NVVM).
    features: str = ""
    # Reduction split: chunk folded serially by one thread before the atomic combine.
    reduction_chunk: int = 64
    # Split a reduction when fewer than this many outputs would be computed in parallel
    # (H100: 132 SMs x 2048 threads = 270K resident threads; 65536 kept elements, one
    # thread each, leave most of them idle).
    split_below: int = 65536
    opt_level: int = 3
    libdevice: str | None = None
    # f16/bf16 matmuls on tensor cores (gpu/kernels/mma.py, WMMA); False: the FP32 path.
    tensor_cores: bool = True


def resolve_options(options) -> GpuOptions:
    """GpuOptions from None, GpuOptions or a dict (unknown keys ignored)."""
    if options is None:
        return GpuOptions()
    if isinstance(options, GpuOptions):
        return options
    known = GpuOptions.__dataclass_fields__
    return GpuOptions(**{k: v for k, v in dict(options).items() if k in known})


# The elementwise fusion the `bufferized` stage starts with (bufferize.stage.BUFFERIZE_PIPELINE
# runs it for both targets), so that elementwise/broadcast chains become one generic
# (hence one kernel); tests/python/gpu_samples.py prepares its samples with it.
LINALG_FUSION_PIPELINE = (
    "builtin.module(func.func("
    # Fuse producer/consumer elementwise generics (incl. broadcasts) into one generic.
    "linalg-fuse-elementwise-ops,"
    # Drop the now-dead producers and fold the constants they captured.
    "canonicalize, cse))"
)

PRE_LOOPS_PIPELINE = (
    "builtin.module(func.func("
    # matmul/fill/transpose -> linalg.generic: one op kind for the Python rewrites.
    "linalg-generalize-named-ops))"
)

LOOPS_PIPELINE = (
    "builtin.module(func.func("
    # Parallel iterators -> scf.parallel, reduction iterators -> scf.for inside it.
    # No canonicalize here: it would inline the one-iteration scf.parallel wrappers.
    "convert-linalg-to-parallel-loops,"
    # Complex arithmetic (mul, abs, exp...) -> arith/math on the parts; the nvvm stage
    # lowers what stays (re, im, create, constant) to LLVM structs.
    "convert-complex-to-standard))"
)

GPU_PIPELINE = (
    "builtin.module("
    # Mapped scf.parallel -> gpu.launch (grid/block from the mapped loop bounds).
    "func.func(convert-parallel-loops-to-gpu),"
    # Affine index arithmetic (mapping maps, reduction index maps) -> arith.
    "lower-affine,"
    # Clone constants/index math used by a launch body into it, so that outlining does
    # not turn them into kernel arguments (the body then folds them).
    "gpu-launch-sink-index-computations,"
    # gpu.launch -> gpu.module + gpu.func, host keeps gpu.launch_func; constants are sunk
    # into the kernels so kernel arguments are buffers (and rare scalars) only.
    "gpu-kernel-outlining,"
    # `x ** n` (math.fpowi, with torch's i64 exponent): constant exponents -> multiplies,
    # others -> powf(x, float(n)) (C's pow: exact for negative bases with integral
    # exponents). convert-gpu-to-nvvm would call libdevice's __nv_powif(float, i32) with
    # the i64 exponent through a mismatched prototype, wrong on the GPU (0.53 relative
    # error measured on an H100); done here, the emulator runs the same arithmetic.
    "gpu.module(math-expand-ops{ops=fpowi}),"
    # Tidy both sides: the host must be left with allocs, launches, copies only.
    "canonicalize, cse)"
)

# Stage `nvvm`: the host function is untouched (the launch plan is read from it); only the
# kernels are lowered. `{target}` is filled with the nvvm-attach-target options.
NVVM_PIPELINE = (
    "builtin.module("
    # nvvm.target on every gpu.module: chip, PTX features, libdevice for math calls.
    "nvvm-attach-target{{{target}}},"
    "gpu.module("
    # Kernels contain scf.for/scf.if (reductions, bound guards): -> cf branches.
    "convert-scf-to-cf,"
    # gpu/arith/math/memref/cf -> NVVM + LLVM; bare pointers: kernels take T* arguments.
    "convert-gpu-to-nvvm{{use-bare-ptr-memref-call-conv=1}},"
    # Parts of complex buffers (re, im, create) -> LLVM structs {re, im}.
    "convert-complex-to-llvm,"
    # Drop casts left between the partial conversions.
    "reconcile-unrealized-casts,"
    "canonicalize, cse))"
)

# Stages `ptx`/`cubin`: serialise every gpu.module; `isa` = PTX text, `bin` = ptxas cubin.
BINARY_PIPELINE = "builtin.module(gpu-module-to-binary{{format={fmt}}})"

# Host-side ops the launch plan can express; anything else left on the host is an error.
HOST_OK = {
    "arith.constant",
    "memref.alloc",
    "memref.dealloc",
    "memref.copy",
    "gpu.memset",
    "memref.expand_shape",
    "memref.collapse_shape",
    "memref.subview",
    "memref.reinterpret_cast",
    "gpu.launch_func",
    "func.return",
}
# Pure scalar arithmetic is tolerated: launch_plan folds it when it feeds launches.
HOST_ARITH_OK = ("arith.",)


def _run(module: ir.Module, pipeline: str) -> None:
    passmanager.PassManager.parse(pipeline, module.context).run(module.operation)


def check_host(module: ir.Module) -> None:
    """Raise if anything but allocs/views/copies/launches/scalar math is left on the host."""
    for op in host_func(module).regions[0].blocks[0].operations:
        name = op.operation.name
        if name in HOST_OK or (name.startswith(HOST_ARITH_OK) and not op.operation.regions):
            continue
        raise GpuLoweringError(
            f"op '{name}' is left in the host function after GPU lowering; the host may "
            f"only allocate, launch kernels, copy and free (op: {str(op)[:200]})"
        )


# --------------------------------------------------------------------------------------
# Public stage functions.


def to_gpu(module: ir.Module, options=None) -> ir.Module:
    """`bufferized` -> `gpu`: kernels in outlined gpu.modules, host func with launch_func."""
    opts = resolve_options(options)
    with module.context, ir.Location.unknown(module.context):
        host_func(module)
        fuse_row_runs(module)
        fills_to_memset(module)
        _run(module, PRE_LOOPS_PIPELINE)
        interchange_parallel_first(module)
        if opts.tensor_cores:
            tile_mma_matmuls(module)
        tile_matmuls(module)
        row_reductions(module)
        split_reductions(module, opts.reduction_chunk, opts.split_below)
        wrap_serial_generics(module)
        _run(module, LOOPS_PIPELINE)
        # TMTensor scans/scatters: serial host loops with an independent dim.
        parallelize_host_loops(host_func(module))
        # Overwriting scatters: two passes that keep the last write.
        parallelize_overwrites(host_func(module))
        # The rest (products): one thread, in order, where small.
        serial_kernels(host_func(module))
        map_host_loops(module, opts.block_size)
        _run(module, GPU_PIPELINE)
        align_fragment_memory(module)
        check_host(module)
    return module


def find_libdevice(explicit: str | None = None) -> str | None:
    """libdevice.10.bc (math.exp & co. lower to __nv_* calls resolved from it)."""
    cands = [explicit] if explicit else []
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            cands.append(os.path.join(root, "nvvm", "libdevice", "libdevice.10.bc"))
    exe = shutil.which("ptxas") or shutil.which("nvcc")
    if exe:
        root = os.path.dirname(os.path.dirname(os.path.realpath(exe)))
        cands.append(os.path.join(root, "nvvm", "libdevice", "libdevice.10.bc"))
    return next((c for c in cands if c and os.path.exists(c)), None)


def _target_options(opts: GpuOptions) -> str:
    parts = [f"chip={opts.chip}", f"O={opts.opt_level}"]
    if opts.features:
        parts.append(f"features={opts.features}")
    lib = find_libdevice(opts.libdevice)
    if lib:
        parts.append(f"l={lib}")
    return " ".join(parts)


def to_nvvm(module: ir.Module, options=None) -> ir.Module:
    """`gpu` -> `nvvm`: target attached, kernel bodies in NVVM/LLVM, bare-pointer args."""
    opts = resolve_options(options)
    with module.context:
        # double -> half types through float, as eager's CUDA kernels convert: NVPTX's
        # cvt.rn.f16.f64 rounds once (lowering/half_conversions.py).
        split_double_to_half(module)
        _run(module, NVVM_PIPELINE.format(target=_target_options(opts)))
        _relax_atomics(module)
        align_kernel_params(module)
    return module


# llvm.atomicrmw `ordering` values (LLVM's AtomicOrdering).
_MONOTONIC = 2


def _relax_atomics(module: ir.Module) -> None:
    """Reduction atomics only combine partial results of the same kernel: nothing is
    ordered by them (the next kernel starts after this one ends). MemRefToLLVM emits
    them `acq_rel` at system scope, which makes the NVPTX CAS loops of float max/min
    `atom.acq_rel.sys.global.cas`; relaxed at device scope (`.relaxed.gpu`) suffices."""
    for g in gpu_modules(module):
        for op in walk(g):
            if op.name == "llvm.atomicrmw":
                op.attributes["ordering"] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), _MONOTONIC)
                op.attributes["syncscope"] = ir.StringAttr.get("device")


def _needs_libdevice(module: ir.Module) -> list[str]:
    return sorted({
        ir.StringAttr(f.attributes["sym_name"]).value
        for f in [op.opview for op in walk(module) if op.name == "llvm.func"]
        if ir.StringAttr(f.attributes["sym_name"]).value.startswith("__nv_")
    })


def _serialize(module: ir.Module, fmt: str, opts: GpuOptions) -> dict:
    with module.context:
        if not gpu_modules(module) or not any(
            o.operation.name == "llvm.func" for g in gpu_modules(module)
            for o in g.regions[0].blocks[0].operations
        ):
            to_nvvm(module, opts)
        missing = _needs_libdevice(module)
        if missing and not find_libdevice(opts.libdevice):
            raise GpuLoweringError(
                f"kernels call {missing} but libdevice.10.bc was not found; set CUDA_HOME"
            )
        names = [ir.StringAttr(g.attributes["sym_name"]).value for g in gpu_modules(module)]
        _run(module, BINARY_PIPELINE.format(fmt=fmt))
        out = {}
        for op in module.body.operations:
            if op.operation.name != "gpu.binary":
                continue
            name = ir.StringAttr(op.attributes["sym_name"]).value
            obj = gpu.ObjectAttr(ir.ArrayAttr(op.attributes["objects"])[0])
            out[name] = obj.object
        # Same order as the gpu.modules were (the plan's module_index).
        return {n: out[n] for n in names}


def to_ptx(module: ir.Module, options=None) -> dict[str, str]:
    """gpu.module name -> PTX text, in module body order. Serialises `module` in place."""
    objs = _serialize(module, "isa", resolve_options(options))
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in objs.items()}


def to_cubin(module: ir.Module, options=None) -> dict[str, bytes]:
    """gpu.module name -> cubin bytes (needs `ptxas` on PATH). Serialises in place."""
    if shutil.which("ptxas") is None:
        raise GpuLoweringError("to_cubin needs NVIDIA's `ptxas` on PATH (CUDA toolkit)")
    objs = _serialize(module, "bin", resolve_options(options))
    return {k: v if isinstance(v, bytes) else v.encode("latin-1") for k, v in objs.items()}
