# lit configuration for lazymlir's stage tests: `lit tests/lit -v`.
import os
import shutil
import subprocess
import sys

import lit.formats

config.name = "lazymlir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
# fx_graphs.py: graph builders the torch/ tests import.
config.excludes = ["Output", "lit.cfg.py", "lit.site.cfg.py", "lit.local.cfg", "README.md",
                   "fx_graphs.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")

# Keep the environment the package needs (PATH for ptxas, CUDA_HOME for libdevice).
for name in ("PATH", "HOME", "CUDA_HOME", "CUDA_PATH", "PYTHONPATH", "LD_LIBRARY_PATH",
             "TMPDIR", "LAZYMLIR_REPRO_DIR"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
# Stage tests never read or write the user's persistent compile cache (~/.cache/lazymlir).
config.environment["LAZYMLIR_CACHE_DIR"] = "off"
# The CPU schedule's tiles follow the host's vector registers (lowering/cpu/isa.py):
# the expected tiles of tests/lit/loops are AVX-512's on every machine.
config.environment["LAZYMLIR_CPU_VECTOR_ISA"] = "avx512"


def _quote(path):
    return f'"{path}"' if " " in path else path


python = _quote(sys.executable)
# Run the tool through this interpreter: works whether or not the console script is on PATH.
config.substitutions.append(("%PYTHON", python))
config.substitutions.append(("lazymlir-opt", f"{python} -m lazymlir.opt"))


def _filecheck():
    try:
        import llvm

        path = os.path.join(list(llvm.__path__)[0], "bin", "FileCheck")
        if os.path.exists(path):
            return path
    except ImportError:
        pass
    return shutil.which("FileCheck") or shutil.which("filecheck") or "FileCheck"


config.substitutions.append(("FileCheck", _quote(_filecheck())))

if shutil.which("ptxas"):
    config.available_features.add("ptxas")

# `gpu`: a CUDA driver and device are usable (checked in a child: importing CUDA here
# must not slow down or break test discovery).
_probe = subprocess.run(
    [sys.executable, "-c",
     "from lazymlir.targets.cuda import unavailable_reason as u; "
     "import sys; sys.exit(0 if u() is None else 1)"],
    capture_output=True, timeout=120)
if _probe.returncode == 0:
    config.available_features.add("gpu")
