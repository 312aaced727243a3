# RUN: %PYTHON %s | FileCheck %s
# An op with no linalg lowering (aten.nonzero becomes tm_tensor.scan, which the linalg
# contract rejects) fails naming the stage and the op, ends with a `reproduce with: lazymlir-opt ...` line, and that command fails the
# same way.
import json
import os
import subprocess
import sys
import tempfile

graph = {"format": "lazymlir-fx", "version": 1,
         "inputs": [{"shape": [8], "dtype": "float32"}],
         "nodes": [{"op": "aten.nonzero.default", "args": [{"ref": ["input", 0, 0]}],
                    "kwargs": {}, "outputs": [{"shape": [8, 1], "dtype": "int64"}]}],
         "outputs": [{"ref": ["node", 0, 0]}]}
tmp = tempfile.mkdtemp()
path = os.path.join(tmp, "nonzero.fx.json")
with open(path, "w") as f:
    json.dump(graph, f)
env = dict(os.environ, LAZYMLIR_REPRO_DIR=tmp)


def opt(*args):
    done = subprocess.run([sys.executable, "-m", "lazymlir.opt", *args], env=env,
                          capture_output=True, text=True)
    return done.returncode, done.stderr.strip().splitlines()


print("TEST: nonzero$compile")
rc, err = opt(path, "--target=cpu")
print("exit", rc)
print("\n".join(err))
# CHECK-LABEL: TEST: nonzero$compile
# CHECK: exit 1
# CHECK: lowering stage '[[STAGE:linalg]]' failed at op 'tm_tensor.scan' (target cpu):
# CHECK-NEXT: op 'tm_tensor.scan' is not allowed after stage 'linalg'
# CHECK: reproduce with: lazymlir-opt --target=cpu --stage=[[STAGE]] {{.*}}lazymlir-repro-[[STAGE]]-

print("TEST: nonzero$reproducer")
command = err[-1].removeprefix("reproduce with: lazymlir-opt ").split()
rc2, err2 = opt(*command)
print("exit", rc2)
print("same first line:", err2[0] == err[0])
print("\n".join(err2))
# CHECK-LABEL: TEST: nonzero$reproducer
# CHECK: exit 1
# CHECK: same first line: True
# CHECK: lowering stage '[[STAGE]]' failed at op 'tm_tensor.scan' (target cpu):
# CHECK-NEXT: op 'tm_tensor.scan' is not allowed
# CHECK: reproduce with: lazymlir-opt --target=cpu --stage=[[STAGE]]
