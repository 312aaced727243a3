"""The cuda backend: `bufferized` -> `gpu` -> `plan` -> `nvvm` -> `ptx` [-> `cubin`].

The stage functions (stages), the kernel mapping pipeline (pipeline), the host side as
an lzrt launch plan (launch_plan, lzrt), the CPU emulator build of the kernels
(emulator) and the kernel generators in `kernels`.
"""
