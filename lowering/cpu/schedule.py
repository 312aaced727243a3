"""CPU schedule: tile and vectorize linalg ops on buffers with the transform dialect.

Runs at the start of the `loops` stage, on the bufferized module. Each linalg
op that a strategy fits is tagged, and transform scripts (built here from the
strategies' plans) tile, vectorize and lower exactly those ops; everything else
keeps the scalar `convert-linalg-to-loops` path that follows in the pipeline (and
LLVM's loop vectorizer at -O3). This module is the driver: it walks the linalg
ops, gives each to the strategies in order (STRATEGIES: the first plan wins),
tags the op, batches the plans into scripts with the finishing patterns, applies
them and reports a failure (ScheduleFailure: the caller compiles the graph again
with fewer strategies).

Strategies (tile sizes for the host's vector registers, lowering/cpu/isa.py; the
same code is correct on any x86-64, llc picks the host's vector width):

- contractions (`linalg.matmul`, `linalg.batch_matmul`, f32, plain or with A read
  transposed: transposed_operands.py): cache tiles around
  register tiles, the accumulator in registers across K, large ones on all cores
  (schedule_contraction.py; their accumulators: schedule_accumulator.py).
- innermost-dim reductions, transposes of the two innermost dims, elementwise ops
  and broadcasts, and parallel blocks of scalar loops for anything else with a
  parallel outermost loop (schedule_vector.py).

What a strategy returns, and what they share: schedule_plan.py.

Symbolic sizes (`?` dims, a graph compiled once for every size): contractions,
innermost reductions, elementwise ops and the parallel blocks get the same
strategies with the ISA's preferred tiles on dynamic dims, whose tile loops are
peeled (full static tiles, then a vectorized remainder), and run on all cores
under a run-time test of their work (lowering/cpu/dynamic.py). Transposes of `?`
sizes keep the scalar loops.

Ops are matched by a `lazymlir.schedule` attribute holding their index; the
attribute is removed afterwards.
"""

from __future__ import annotations

from . import dynamic, isa, schedule_accumulator, schedule_contraction, schedule_vector
from ..mlir_runner import PipelineFailure, walk
from .schedule_plan import Plan

TAG = "lazymlir.schedule"
# Plans per transform script (build_script says why not all in one).
BATCH = 64

STRATEGIES = (schedule_contraction.contraction_plan, schedule_vector.innermost_reduction_plan,
              schedule_vector.transpose_plan, schedule_vector.elementwise_vector_plan,
              schedule_vector.parallel_outer_plan)

# After the per-op steps, on the whole function: turn the vectorized
# matmuls into vector.contract, CSE (so a transfer pair has equal indices),
# keep accumulators in registers across the reduction loop, then lower
# contractions to FMAs and transfers to 1-D (what convert-vector-to-llvm takes).
_FINISH = """
    %f = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %f {
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.apply_cse to %f : !transform.any_op
    %h = transform.structured.hoist_redundant_vector_transfers %f : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %h {
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.vector.lower_multi_reduction lowering_strategy = "innerreduction"
      transform.apply_patterns.vector.lower_transpose {transpose_lowering}
      transform.apply_patterns.vector.cast_away_vector_leading_one_dim
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.lower_transfer max_transfer_rank = 1
    } : !transform.any_op
"""


def _is_linalg(op) -> bool:
    return op.name.startswith("linalg.")


def _linalg_ops_after(module) -> list[tuple]:
    """(linalg op, the op right before it in its block or None) for the linalg ops of
    `module` (not those nested in one), as OpViews. In the pre-order walk, the element
    before an op is its previous sibling exactly when it is in the same block (a
    sibling between them, or its nested ops, would come in between)."""
    ops = walk(module.operation, skip=_is_linalg)
    return [(op.opview, previous.opview if previous.block == op.block else None)
            for previous, op in zip(ops, ops[1:]) if _is_linalg(op)]


def _linalg_ops(module):
    """The linalg ops of `module` (not those nested in one), as OpViews."""
    return [op for op, _ in _linalg_ops_after(module)]


def _has_dynamic_sizes(op) -> bool:
    from mlir import ir

    return any(isinstance(v.type, ir.ShapedType) and not ir.ShapedType(v.type).has_static_shape
               for v in op.operation.operands)


def _plan_op(op, previous, plans: list, isolated: list | None,
             zero_inits: list | None) -> None:
    """Tag `op` with the first strategy that fits it and append its plan to `plans`."""
    from mlir import ir

    for strategy in STRATEGIES:
        plan = strategy(op, len(plans))
        if plan is None:
            continue
        if plan.guard is not None:
            for copy in dynamic.guard(op, *plan.guard):
                _plan_op(copy, None, plans, isolated, zero_inits)
            return
        # Tagged by batch (build_script): a guarded op's copies are planned in the
        # order a walk meets them (the parallel copy, then the serial one).
        op.operation.attributes[TAG] = ir.IntegerAttr.get(
            ir.IntegerType.get_signless(64), plan.index // BATCH)
        plans.append(plan)
        if plan.elementwise:
            schedule_vector.load_scalar_inputs(op)
        if plan.contraction and isolated is not None:
            fill = (schedule_accumulator.zero_fill_before(op, previous)
                    if plan.reads_output_once else None)
            cast = schedule_accumulator.isolate_accumulator(op)
            if cast is not None:
                isolated.append(cast)
                if fill is not None and zero_inits is not None:
                    zero_inits.append((cast, fill))
        return


def build_script(module, isolated: list | None = None,
                 zero_inits: list | None = None,
                 dynamic_sizes: bool = True) -> list[str] | None:
    """Tag the ops a strategy fits and return the transform modules' texts, to apply in
    order (None: nothing to do).
    The accumulator casts of contractions (`schedule_accumulator.isolate_accumulator`)
    are appended to `isolated` (the caller removes them after the script ran); none
    without it. Those of contractions that may start from zero registers go to
    `zero_inits` too, with the fill before them (`schedule_accumulator.zero_inits`)."""
    plans: list[Plan] = []
    for op, previous in _linalg_ops_after(module):
        if dynamic_sizes or not _has_dynamic_sizes(op):
            _plan_op(op, previous, plans, isolated, zero_inits)
    if not plans:
        return None
    # BATCH plans per script, each batch's ops by one match of its tag split into a
    # handle per plan (they come in the order the plans were made: a walk, and none of
    # them nests in another, so pre- and post-order agree); the finishing patterns
    # last, on the whole module. Linear in the plans: a match per plan walks the whole
    # module, and the interpreter checks every live handle when one is consumed (both
    # quadratic: 19 s of CPU for the ~5000 plans of a DenseNet-121 training step).
    scripts = []
    for first in range(0, len(plans), BATCH):
        batch = plans[first:first + BATCH]
        handles = ", ".join(f"%op{plan.index}" for plan in batch)
        types = ", ".join(["!transform.any_op"] * len(batch))
        scripts.append(_sequence(
            f"    %all = transform.structured.match attributes{{{TAG} = {first // BATCH} : i64}}"
            f" in %root : (!transform.any_op) -> !transform.any_op\n"
            f"    {handles} = transform.split_handle %all : (!transform.any_op) -> ({types})\n"
            + "".join(plan.script for plan in batch)))
    scripts.append(_sequence(_FINISH.replace("{transpose_lowering}",
                                             isa.host().transpose_lowering)))
    return scripts


def _sequence(body: str) -> str:
    return ("module attributes {transform.with_named_sequence} {\n"
            "  transform.named_sequence @__transform_main("
            "%root: !transform.any_op {transform.readonly}) {\n"
            + body + "    transform.yield\n  }\n}\n")


def _strip_tags(module) -> None:
    for op in _linalg_ops(module):
        for name in (TAG, dynamic.PARALLEL_CHOICE):
            if name in op.operation.attributes:
                del op.operation.attributes[name]


def apply(module, dynamic_sizes: bool = True) -> None:
    """Schedule `module` in place (call inside its context). `dynamic_sizes=False`:
    ops with `?` sizes keep their scalar loops (the retry after a failure)."""
    from mlir import ir
    from mlir.dialects.transform import interpreter

    isolated: list = []
    zero_inits: list = []
    context = module.context
    permissive = context.allow_unregistered_dialects
    context.allow_unregistered_dialects = True  # the accumulator casts, while they live
    try:
        scripts = build_script(module, isolated, zero_inits, dynamic_sizes)
        if scripts is None:
            return
        for script in scripts:
            transform_module = ir.Module.parse(script)
            entry = transform_module.body.operations[0]
            try:
                interpreter.apply_named_sequence(module.operation, entry, transform_module)
            except Exception as error:  # the caller retries (from the text) without it
                raise ScheduleFailure(f"cpu schedule failed: {error}") from None
        schedule_accumulator.zero_inits(zero_inits)
        schedule_accumulator.remove_casts(isolated)
    finally:
        context.allow_unregistered_dialects = permissive
    _strip_tags(module)


class ScheduleFailure(PipelineFailure):
    """The transform script failed on this module; the scalar loops still work."""
