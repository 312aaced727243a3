"""FX-level rewrites that give compiled graphs eager PyTorch's numerics.

Applied to the GraphModule that `fx_graph.to_graph_module` rebuilds, before
torch-mlir imports it, so both targets (CPU and CUDA) get them. Each rewrite
replaces one ATen op by ATen ops torch-mlir already lowers; none needs a new
lowering. Why at this level rather than in MLIR: the facts they depend on (the
op's meaning, unsigned dtypes, which result is an index) are lost by the
`linalg` stage (ui8 becomes signless i8, `maximum` becomes cmpf+select that
cannot be told apart from a deliberate select).

- Half/bfloat16 ops eager computes in float32 (pools, fmod, activations,
  log_softmax, and mul/div by a number, whose value is not rounded to the half
  type first) are computed in float32 and rounded once (numerics_opmath.py).
- Half/bfloat16 reductions accumulate in float32 (eager's accumulate type);
  torch-mlir's `sum` adds in f16 and stops at 2048. Long float32 cumsums
  accumulate in float64, as eager's CPU kernel does.
- uint8 operands of ops whose result depends on signedness (sum, prod,
  remainder, true division) are widened first: torch-mlir extends and divides
  them as signed i8; int8 operands of scalar/rounding ops too (torch-mlir
  cannot lower them).
- Long float sums/means (and layer_norm's statistics) are blocked: the
  reduced dim of R elements becomes [R // B, B], summed over B, then over the
  blocks (recursively while long), plus the tail. Sequential accumulation
  lost ~2e-5 relative over 50M elements; eager's cascade sum is ~1e-8.
- NaN propagates through maximum/minimum/clamp as in eager, and argmax/argmin/
  max.dim/min.dim return the index of the first NaN.
- Integer negation is x * -1 (torch-mlir negates integers through float32), and so is
  an integer // -1 (torch-mlir folded INT64_MIN // -1 to 0; eager wraps).
- x == x is False for NaN (torch-mlir folds it to True; isfinite uses it).
- bool + bool is a logical or (torch-mlir added a bool tensor and `True` as i1).
- Clamps (by tensors) and sorts of bools run on int32: torch-mlir orders i1
  as signed, True below False; so do accumulating index_put/index_add/
  scatter_add of bools (eager ors them, i1 addition wraps).

The float rules live in numerics_floats.py and numerics_opmath.py, the integer, bool
and NaN rules in numerics_exact.py, the node builder they share in fx_rewrite.py; this
module runs them in order.
"""

from __future__ import annotations

import torch.fx

from . import numerics_exact, numerics_floats, numerics_opmath
from .fx_rewrite import Builder, fake_mode, replace

# In this order: a rule sees the nodes the rules before it created.
REWRITES = (
    numerics_floats.logcumsumexp,
    numerics_exact.reciprocal,
    numerics_exact.divide_by_minus_one,
    numerics_exact.integer_neg,
    numerics_exact.int_scatter_mean,
    numerics_floats.half_tuple_opmath,
    numerics_floats.half_accumulation,
    numerics_opmath.log_softmax,
    numerics_opmath.opmath,
    numerics_opmath.scalar_opmath,
    numerics_opmath.alpha_opmath,
    numerics_opmath.elu,
    numerics_exact.widen_bytes,
    numerics_floats.blocked,
    numerics_floats.layer_norm,
    numerics_exact.nan_minmax,
    numerics_exact.first_nan_index,
    numerics_exact.self_equal,
    numerics_exact.bool_add,
    numerics_exact.bool_order,
    numerics_floats.gelu_tanh,
)


def apply(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Run every rewrite over the graph; new nodes are visited by later rewrites."""
    mode = fake_mode(gm)
    if mode is None:
        return gm
    for rewrite in REWRITES:
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or getattr(node, "_erased", False):
                continue
            builder = Builder(gm.graph, node.next, mode)
            new = rewrite(builder, node)
            if new is not None:
                replace(node, new, builder.created)
    gm.graph.lint()
    gm.recompile()
    return gm
