"""`python -m lazymlir.gpu_kit build KIT_DIR [--only case,case] [--source CHECKOUT]`: build
the GPU check kit (build.py)."""

from __future__ import annotations

import argparse
import sys

from . import build, cases


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lazymlir.gpu_kit",
                                     description="Build the GPU check kit (docs/gpu-results.md)")
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="compile the kit's graphs into KIT_DIR")
    make.add_argument("kit_dir")
    make.add_argument("--only", help=f"comma-separated cases (all: {', '.join(cases.CASES)})")
    make.add_argument("--source", help="the lazymlir checkout whose cuda_runtime/ sources "
                                       "the kit carries (default: this package's)")
    args = parser.parse_args(argv)
    try:
        build.build(args.kit_dir, args.only.split(",") if args.only else None, args.source)
    except (RuntimeError, ValueError) as error:
        print(f"gpu_kit: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
