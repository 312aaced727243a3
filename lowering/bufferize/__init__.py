"""The `bufferized` stage both backends share: linalg on tensors -> linalg on memrefs.

Besides the upstream pipeline (stage): the rewrites it needs before and after, on
graph inputs (graph_inputs), repeated results (unique_results), buffer copies
(buffer_copies) and bool storage (i1_storage).
"""
