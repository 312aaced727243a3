"""The CPU stages after `bufferized`: `loops` (scf loops over memrefs, tiled and
vectorized by the schedule, parallel nests as OpenMP regions) and `llvm` (the LLVM
dialect, ready for mlir-translate + llc in cpu/codegen.py).
"""

from __future__ import annotations

import logging
import re

from . import (asserts, bf16_rounding, c_interface, deallocation, entry_blocks, outline,
               output_signals, parallel, schedule)
from ..bufferize import buffer_copies
from ..mlir_runner import UPSTREAM, run_pipeline

log = logging.getLogger("lazymlir.lowering.cpu")

LOOPS_PIPELINE = (
    "builtin.module("
    # What schedule did not tile and vectorize: linalg on buffers -> scf
    # loops (LLVM's loop vectorizer takes the simple ones at -O3).
    "func.func(convert-linalg-to-loops),"
    # Complex arithmetic (abs, div, exp...) -> arith/math on the parts; what stays
    # (re, im, create, constant) the llvm stage lowers to LLVM structs.
    "func.func(convert-complex-to-standard))"
)
# Then the temporaries get their deallocations: written directly where the graph is
# straight-line code (deallocation.py), else by the upstream pipeline.
FREED_PIPELINE = "builtin.module(canonicalize,cse)"
DEALLOCATION_PIPELINE = (
    "builtin.module(buffer-deallocation-pipeline,convert-bufferization-to-memref,"
    "canonicalize,cse)"
)
# Then each loop nest becomes a function of its own, identical ones one function
# (outline.outline_loop_nests), and:
PARALLEL_LOOPS_PIPELINE = (
    "builtin.module("
    # The scf.forall loops (fusion, schedule: only for work large
    # enough to pay for a dispatch) run on all cores, as OpenMP regions
    # (lowering/cpu/parallel.py says how and on which threads).
    + parallel.PARALLEL_PASSES + ","
    "canonicalize,cse)"
)

# The complex ops convert-complex-to-standard leaves (the loops stage allows them).
COMPLEX_PARTS = frozenset({"complex.re", "complex.im", "complex.create", "complex.constant"})

LLVM_PIPELINE = (
    "builtin.module("
    # n-D vector transfers left by the schedule -> 1-D ones (unrolled).
    "func.func(convert-vector-to-scf{full-unroll=true}),"
    "lower-affine,"
    # Structured control flow -> branches, which the LLVM dialect expresses.
    "convert-scf-to-cf,"
    # Subviews/reshapes -> explicit descriptors before the memref lowering.
    "expand-strided-metadata,"
    # ...which computes subview offsets with affine.apply.
    "lower-affine,"
    # Buffers through lazymlir/targets/cpu_alloc.py's caching allocator, not malloc/free.
    "finalize-memref-to-llvm{use-generic-functions=1},"
    # fpowi/ipowi with i64 exponents (x**2 from torch) have no correct LLVM
    # intrinsic form; outline them as software loops first.
    "convert-math-to-funcs,convert-scf-to-cf,"
    # 1-D vector ops -> LLVM vector instructions (before the arith/math
    # conversions, which it also uses for vector element types). Horizontal
    # sums may reassociate (a shuffle tree, as eager's vectorized sums do):
    # only the schedule's reductions create them.
    "convert-vector-to-llvm{reassociate-fp-reductions},convert-ub-to-llvm,"
    "convert-math-to-llvm,convert-math-to-libm,convert-arith-to-llvm,convert-cf-to-llvm,"
    # The entry gets a C interface (_mlir_ciface_main), which c_interface.py makes
    # take its memref descriptor pointers packed in one array.
    "convert-func-to-llvm,convert-index-to-llvm,"
    # Complex values (parts of complex64/complex128 buffers) -> LLVM structs.
    "convert-complex-to-llvm,"
    # OpenMP regions (parallel loops) get LLVM types; mlir-translate outlines them.
    "convert-openmp-to-llvm,"
    # Casts left between the partial conversions must all cancel out.
    "reconcile-unrealized-casts)"
)



def _unscheduled(module) -> None:
    buffer_copies.strided_copies_to_loops(module)
    parallel.run_small_loops_in_order(module)


def _schedule(module) -> None:
    _unscheduled(module)
    schedule.apply(module)


_DYNAMIC_MEMREF = re.compile(r"memref<[^>]*\?")


def _schedule_static_sizes(module) -> None:
    _unscheduled(module)
    schedule.apply(module, dynamic_sizes=False)


def _lower(text: str, before):
    module = run_pipeline(UPSTREAM, text, LOOPS_PIPELINE, before=before)
    freed = deallocation.free_at_end(module)
    return run_pipeline(UPSTREAM, None, FREED_PIPELINE if freed else DEALLOCATION_PIPELINE,
                        module=module)


def to_loops(text: str):
    try:
        module = _lower(text, _schedule)
    except schedule.ScheduleFailure as error:
        # A strategy that does not fit an op costs speed, not the graph: again
        # without the schedule of ops with `?` sizes (lowering/cpu/dynamic.py), the
        # newer one, then with none (every linalg op to scalar loops).
        module = None
        if _DYNAMIC_MEMREF.search(text):
            log.warning("%s; compiling this graph again without tiling/vectorization of "
                        "ops with dynamic sizes", error)
            try:
                module = _lower(text, _schedule_static_sizes)
            except schedule.ScheduleFailure as again:
                error = again
        if module is None:
            log.warning("%s; compiling this graph without tiling/vectorization", error)
            module = _lower(text, _unscheduled)
    # Outlined before the parallel loops become OpenMP regions, so that a parallel
    # nest repeated by every layer of a model is one function too (the regions are
    # most of a transformer graph's code). On the same module: printing and parsing it
    # again cost ~1.3 s of CPU on a DenseNet-121 training step's 4 MB of loops.
    module = run_pipeline(UPSTREAM, None, PARALLEL_LOOPS_PIPELINE,
                          before=outline.outline_loop_nests, module=module)
    # Last: each out-parameter's signal goes after the op that last touches it, in the
    # function as it is run (output_signals.py).
    with module.context:
        output_signals.insert(module)
    return module


def _mark_c_interface(module) -> list[str]:
    """The public functions (the graph; not its outlined nests) get a C interface;
    returns their names."""
    from mlir import ir

    names = []
    for op in module.body.operations:
        if op.operation.name == "func.func" and "sym_visibility" not in op.attributes:
            op.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            names.append(ir.StringAttr(op.attributes["sym_name"]).value)
    return names


def _referenced(text: str, names: list[str]) -> set[str]:
    """Those of `names` that `text` refers to other than by their definition: a call
    or other use. A scan of the text (`str.find`; a regex took 0.1 s on 4 MB): the same
    count on the LLVM module, a walk of its ~500k ops, took ~1 s of CPU on a
    DenseNet-121 training step."""
    found = set()
    for name in names:
        symbol = "@" + (name if re.fullmatch(r"[\w$.]+", name) else f'"{name}"')
        position = text.find(symbol)
        while position >= 0:
            end = position + len(symbol)
            line = text.rfind("\n", 0, position) + 1
            before = text[line:position]
            if (end < len(text) and (text[end].isalnum() or text[end] in "_$.\"")) \
                    or before.endswith(("func.func ", "public ")):
                pass  # a longer name, or the definition
            elif not before.lstrip().startswith("//"):  # (a lit test's CHECK lines)
                found.add(name)
                break
            position = text.find(symbol, end)
    return found


def to_llvm(text: str):
    noalias: dict[str, list[int]] = {}
    used: set[str] = set()

    def before(module) -> None:
        used.update(_referenced(text, _mark_c_interface(module)))
        # After the marking: the flag's getter is a plain C function. (Each of these
        # walks the module: not where the text says there is nothing to find.)
        if "cf.assert" in text:
            asserts.flag_asserts(module)
        noalias.update(outline.noalias_plan(module))
        # Rounding to bfloat16/float16 as eager's, whatever the host's instructions
        # (bf16_rounding.py): double -> bfloat16/float16 through float, half `math`
        # and bfloat16 arithmetic in float, float -> bfloat16 in integers; expm1 and
        # log1p without cancellation (small_math.py).
        bf16_rounding.apply(module, text)
        # A big graph's entry in blocks: the conversions are quadratic in a block's length.
        entry_blocks.split_entry_blocks(module)

    module = run_pipeline(UPSTREAM, text, LLVM_PIPELINE, before=before)
    outline.apply_noalias(module, noalias)
    asserts.share_flag(module)
    with module.context:
        c_interface.fold_into_c_interfaces(module, called=used)
    return module
