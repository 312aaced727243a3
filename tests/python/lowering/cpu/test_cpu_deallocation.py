"""The `loops` stage's deallocations written directly for straight-line graphs
(lowering/cpu/deallocation.py): the same IR as upstream's buffer-deallocation-pipeline,
which still serves the other shapes; and a pipeline's module verified once at its end
(lowering/mlir_runner.py)."""

from __future__ import annotations

import pytest
from mlir import ir

from lazymlir.lowering.cpu import deallocation, stages
from lazymlir.lowering.mlir_runner import UPSTREAM, PipelineFailure, print_module, run_pipeline

# Temporaries in the function's one block: a view of one, one unused, a global.
_STRAIGHT = """
memref.global "private" constant @k : memref<4xf32> = dense<1.0>
func.func @main(%a: memref<4xf32>, %out: memref<2x2xf32>) {
  %c0 = arith.constant 0 : index
  %g = memref.get_global @k : memref<4xf32>
  %t = memref.alloc() : memref<4xf32>
  %u = memref.alloc() : memref<4xf32>
  %dead = memref.alloc() : memref<8xf32>
  memref.copy %a, %t : memref<4xf32> to memref<4xf32>
  %x = memref.load %t[%c0] : memref<4xf32>
  %y = memref.load %g[%c0] : memref<4xf32>
  %s = arith.addf %x, %y : f32
  memref.store %s, %u[%c0] : memref<4xf32>
  %v = memref.expand_shape %u [[0, 1]] output_shape [2, 2] : memref<4xf32> into memref<2x2xf32>
  memref.copy %v, %out : memref<2x2xf32> to memref<2x2xf32>
  return
}
"""

# A temporary allocated inside a loop: freed inside it, by the upstream pipeline.
_IN_LOOP = """
func.func @main(%a: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    %t = memref.alloc() : memref<4xf32>
    memref.copy %a, %t : memref<4xf32> to memref<4xf32>
    %x = memref.load %t[%i] : memref<4xf32>
    memref.store %x, %a[%i] : memref<4xf32>
  }
  return
}
"""


def _upstream(text: str) -> str:
    module = run_pipeline(UPSTREAM, text, stages.LOOPS_PIPELINE)
    return print_module(run_pipeline(UPSTREAM, None, stages.DEALLOCATION_PIPELINE,
                                     module=module))


def _direct(text: str) -> tuple[bool, str]:
    module = run_pipeline(UPSTREAM, text, stages.LOOPS_PIPELINE)
    freed = deallocation.free_at_end(module)
    module = run_pipeline(UPSTREAM, None, stages.FREED_PIPELINE if freed
                          else stages.DEALLOCATION_PIPELINE, module=module)
    return freed, print_module(module)


def test_straight_line_temporaries_are_freed_as_the_upstream_pipeline_frees_them():
    freed, text = _direct(_STRAIGHT)
    assert freed
    assert text == _upstream(_STRAIGHT)
    assert text.count("memref.dealloc") == 2  # %t and %u; %dead is gone, the global stays


def test_a_temporary_inside_a_loop_keeps_the_upstream_pipeline():
    freed, text = _direct(_IN_LOOP)
    assert not freed
    assert text == _upstream(_IN_LOOP)
    assert "memref.dealloc" in text


def test_a_pipeline_that_leaves_invalid_ir_fails_at_its_end():
    def break_return(module):
        # the function now returns a value its type does not declare
        func = module.body.operations[0]
        ret = list(func.regions[0].blocks[0].operations)[-1]
        with ir.InsertionPoint(ret), ret.location:
            zero = ir.Operation.create("arith.constant", results=[ir.IndexType.get()],
                                       attributes={"value": ir.IntegerAttr.get(
                                           ir.IndexType.get(), 0)})
            ir.Operation.create("func.return", operands=[zero.result])
        ret.erase()

    with pytest.raises(PipelineFailure):
        run_pipeline(UPSTREAM, "func.func @f() { return }", "builtin.module(cse)",
                     before=break_return)
