"""The GPU check kit: graphs compiled here for the cuda target, run on a GPU machine
that has no compiler stack, in one command.

    python -m lazymlir.gpu_kit build KIT_DIR [--only case,case]   (here: build.py)
    python KIT_DIR/run.py [--driver cuda|emulator] [--out DIR]    (there: kit_runner.py)

cases.py lists the graphs; docs/gpu-results.md ("The GPU check kit") describes the
kit and its report.
"""
