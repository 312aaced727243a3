"""The cuda backend: `bufferized` -> `gpu` -> `plan` -> `nvvm` -> `ptx` [-> `cubin`].

The stage functions (stages), the kernel mapping pipeline (pipeline), the host side as
an lzrt launch plan (launch_plan, lzrt), the CPU emulator build of the kernels
(emulator; its thread loops in emulator_threads, its warp-level ops in emulator_warps)
and the kernel generators in `kernels`.
"""
