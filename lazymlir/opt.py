"""`lazymlir-opt`: run lowering stages (or a raw pass pipeline) on a dumped file.

    lazymlir-opt FILE|- [--target cpu|cuda] [--stage NAME | --from NAME --to NAME]
                 [--pass-pipeline=PIPELINE] [-split-input-file] [-verify-diagnostics]
                 [--verify-only] [--emit=mlir|ptx] [-o OUT]

The input is a stage output (`// lazymlir-stage: NAME` first line), handwritten
MLIR (its stage is guessed from the dialects in it) or an fx graph (`.fx.json`).
`--stage NAME` runs exactly that stage on the input (which should be the output
of the stage before it); `--from/--to` runs a range (`--from` defaults to the
input's detected stage, `--to` to the target's last stage); with neither, the
input runs to the end of the target's pipeline. All stage work is done by the
registry in `lowering.stages`, the same code the device compiler runs, so a
reproducer printed by a failing compile (`reproduce with: lazymlir-opt ...`)
fails here the same way. `--emit=ptx` prints the PTX text of every kernel module
of a `ptx`-stage result instead of the MLIR. `-verify-diagnostics` checks
`// expected-error [@+N|@-N] {{text}}` comments against the emitted errors.
"""

from __future__ import annotations

import argparse
import re
import sys

from .lowering import stages
from .lowering.errors import LoweringError
from .lowering.mlir_runner import TORCH_MLIR, UPSTREAM, PipelineFailure, print_module, run_pipeline

SPLIT_MARKER = "// -----"
_CUDA_ONLY = {"gpu", "plan", "nvvm", "ptx", "cubin"}
_EXPECTED = re.compile(r"//\s*expected-error\s*(@[+-]?\d+)?\s*\{\{(.*?)\}\}")
_LOC = re.compile(r'^(?:error: )?(?:loc\()?"[^"]*":(\d+):\d+\)?:\s*(.*)')


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lazymlir-opt", description=__doc__.splitlines()[0])
    p.add_argument("input", help="input file, or - for stdin")
    p.add_argument("--target", choices=stages.TARGETS, default=None)
    p.add_argument("--stage", help="run exactly this stage")
    p.add_argument("--from", dest="from_stage", help="stage the input holds (default: detected)")
    p.add_argument("--to", dest="to_stage", help="last stage to run (default: target's last)")
    p.add_argument("--pass-pipeline", help="run this raw MLIR pass pipeline instead of stages")
    p.add_argument("--chip", default="sm_90", help="CUDA architecture (default sm_90)")
    p.add_argument("--emit", choices=("mlir", "ptx"), default="mlir")
    p.add_argument("-split-input-file", "--split-input-file", action="store_true")
    p.add_argument("-verify-diagnostics", "--verify-diagnostics", action="store_true")
    p.add_argument("--verify-only", action="store_true", help="parse and verify only")
    p.add_argument("-o", dest="output", default="-")
    return p


class Diagnosed(Exception):
    """Processing a chunk emitted errors: (line or None, message) pairs."""

    def __init__(self, errors: list[tuple[int | None, str]], text: str):
        super().__init__(text)
        self.errors = errors


def _errors_from_text(text: str) -> list[tuple[int | None, str]]:
    """Errors in a failure's text: 'loc("-":L:C): msg' or 'error: "-":L:C: msg' lines."""
    out = []
    for line in text.splitlines():
        match = _LOC.match(line.strip())
        if match:
            out.append((int(match.group(1)), match.group(2)))
    return out or [(None, text)]


def _verify_only(text: str) -> str:
    from mlir import ir

    from .lowering.gpu.lzrt import load_lzrt

    context = ir.Context()
    load_lzrt(context)
    errors: list[tuple[int | None, str]] = []

    def handler(diagnostic):
        if diagnostic.severity == ir.DiagnosticSeverity.ERROR:
            match = re.search(r":(\d+):\d+", str(diagnostic.location))
            errors.append((int(match.group(1)) if match else None, diagnostic.message))
        return True

    context.attach_diagnostic_handler(handler)
    try:
        with context:
            module = ir.Module.parse(text)
            module.operation.verify()
    except Exception as error:  # noqa: BLE001  MLIRError, ValueError
        # Parse/verify errors come back on the exception, not through the handler.
        for diagnostic in getattr(error, "error_diagnostics", []):
            match = re.search(r":(\d+):\d+", str(diagnostic.location))
            errors.append((int(match.group(1)) if match else None, diagnostic.message))
        raise Diagnosed(errors or [(None, str(error))], str(error)) from None
    return print_module(module)


def _raw_pipeline(text: str, pipeline: str) -> str:
    bindings = TORCH_MLIR if "torch." in text else UPSTREAM
    context = bindings.context()
    if bindings is UPSTREAM and "lzrt." in text:
        from .lowering.gpu.lzrt import load_lzrt
        load_lzrt(context)
    try:
        return print_module(run_pipeline(bindings, text, pipeline, context=context))
    except PipelineFailure as error:
        raise Diagnosed(_errors_from_text(str(error)), str(error)) from None


def _target(args, detected: str) -> str:
    if args.target:
        return args.target
    wanted = {args.stage, args.from_stage, args.to_stage, detected}
    return "cuda" if wanted & _CUDA_ONLY else "cpu"


def detect(text: str) -> str:
    """The input's stage; comment lines (other than the stage marker) are not looked at."""
    code = [line for line in text.splitlines()
            if not line.lstrip().startswith("//") or line.startswith(stages.STAGE_MARKER)]
    return stages.detect_stage("\n".join(code))


def _run_stages(text: str, args) -> str:
    detected = detect(text)
    options = stages.Options(target=_target(args, detected), chip=args.chip)
    names = stages.stage_names(options.target)
    if args.stage:
        if args.stage not in names or names.index(args.stage) == 0:
            raise ValueError(f"stage '{args.stage}' cannot be run for target {options.target} "
                             f"({' -> '.join(names)})")
        # The input should hold the stage before NAME; an earlier input (detected) first
        # runs the stages in between, so `--stage=ptx` also takes bufferized IR.
        start, stop = names[names.index(args.stage) - 1], args.stage
        if detected in names and names.index(detected) < names.index(start):
            start = detected
    else:
        start, stop = args.from_stage or detected, args.to_stage
    result = stages.run_stages(text, options, start=start, stop=stop)
    if args.emit == "ptx":
        from .lowering.gpu.stages import kernel_objects

        kernels = kernel_objects(result.text)
        if not kernels or any(kind != "ptx" for _, _, kind in kernels):
            raise ValueError("--emit=ptx needs a ptx-stage result (gpu.binary with PTX)")
        return "\n".join(f"// kernel module: {name}\n{data.decode()}" for name, data, _ in kernels)
    return result.text


def process(text: str, args) -> str:
    """One input (or one -split-input-file chunk) -> output text; raises Diagnosed."""
    if args.verify_only:
        return _verify_only(text)
    if args.pass_pipeline:
        return _raw_pipeline(text, args.pass_pipeline)
    try:
        return _run_stages(text, args)
    except LoweringError as error:
        if args.verify_diagnostics:
            raise Diagnosed(_errors_from_text(error.detail), str(error)) from None
        raise


def _expected(text: str) -> list[tuple[int, str]]:
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in _EXPECTED.finditer(line):
            offset = int(match.group(1)[1:]) if match.group(1) else 0
            out.append((number + offset, match.group(2)))
    return out


def verify_chunk(text: str, args) -> list[str]:
    """-verify-diagnostics: problems (empty when every expectation matched exactly)."""
    try:
        process(text, args)
        errors: list[tuple[int | None, str]] = []
    except Diagnosed as diagnosed:
        errors = list(diagnosed.errors)
    problems = []
    for line, message in _expected(text):
        hit = next((e for e in errors if e[0] == line and message in e[1]), None)
        if hit is None:
            problems.append(f"line {line}: expected error '{message}' was not produced")
        else:
            errors.remove(hit)
    problems += [f"line {line}: unexpected error: {message}" for line, message in errors]
    return problems


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.input == "-":
        text = sys.stdin.read()
    else:
        with open(args.input) as f:
            text = f.read()
    is_fx = text.lstrip().startswith("{")
    chunks = [text] if is_fx or not args.split_input_file else \
        re.split(r"^// -----.*\n?", text, flags=re.MULTILINE)
    outputs, failed = [], False
    for chunk in chunks:
        try:
            if args.verify_diagnostics:
                problems = verify_chunk(chunk, args)
                for problem in problems:
                    print(f"{args.input}: {problem}", file=sys.stderr)
                failed |= bool(problems)
                continue
            outputs.append(process(chunk, args))
        except LoweringError as error:
            print(error, file=sys.stderr)
            return 1
        except (Diagnosed, ValueError, PipelineFailure, OSError) as error:
            print(f"lazymlir-opt: error: {error}", file=sys.stderr)
            return 1
    out = f"\n{SPLIT_MARKER}\n".join(o.rstrip("\n") for o in outputs)
    if out:
        out += "\n"
    if args.output == "-":
        sys.stdout.write(out)
    else:
        with open(args.output, "w") as f:
            f.write(out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
