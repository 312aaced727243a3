"""The compiler: an fx graph lowered stage by stage to an artifact folder.

`stages` is the registry of stages (front -> bufferized -> each backend's stages),
`backend` the interface a target implements, `artifacts` the packaging of the last
stage's output. The stage families live in packages: `front` (torch-mlir: fx import
to linalg-on-tensors), `bufferize` (the shared `bufferized` stage), `cpu` and `gpu`
(the backends).
"""
