"""The execution layer: graph executor (sync lifecycle), graph cache, compiler driver,
compile worker, probes and counted eager fallback. Works on fx-stage graph
documents (lowering/front/fx_graph.py) and target buffers; knows nothing of lazy
tensors (the tracing layer above binds results to them).
"""
