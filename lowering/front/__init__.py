"""Front stages run in torch-mlir's build: fx graph -> `torch` -> `torch-backend` -> `linalg`.

Also the fx-graph format itself (fx_graph), the decompositions and numerics rewrites
applied before import, and the index/zero-divisor checks compiled into graphs.
"""
