"""The tracing layer: lazy values, the tracer, graph building and sync points.

User tensors are FunctionalTensorWrappers around `values.LazyTensor`; the
tracer records the functional ATen ops that reach them, `graph` turns pending
values into an fx-stage graph, and `materialize` (sync points) hands that
graph to the execution layer and binds (or fails) the values.
"""
