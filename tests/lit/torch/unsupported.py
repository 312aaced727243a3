# RUN: %PYTHON %s | FileCheck %s
# An op with no linalg lowering (torch-mlir cannot legalize aten._adaptive_avg_pool2d_backward)
# fails naming the stage and the op, ends with a `reproduce with: lazymlir-opt ...` line, and
# that command fails the same way.
import json
import os
import subprocess
import sys
import tempfile

graph = {"format": "lazymlir-fx", "version": 1,
         "inputs": [{"shape": [1, 2, 3, 3], "dtype": "float32"},
                    {"shape": [1, 2, 7, 7], "dtype": "float32"}],
         "nodes": [{"op": "aten._adaptive_avg_pool2d_backward.default",
                    "args": [{"ref": ["input", 0, 0]}, {"ref": ["input", 1, 0]}],
                    "kwargs": {}, "outputs": [{"shape": [1, 2, 7, 7], "dtype": "float32"}]}],
         "outputs": [{"ref": ["node", 0, 0]}]}
tmp = tempfile.mkdtemp()
path = os.path.join(tmp, "pool_backward.fx.json")
with open(path, "w") as f:
    json.dump(graph, f)
env = dict(os.environ, LAZYMLIR_REPRO_DIR=tmp)


def opt(*args):
    done = subprocess.run([sys.executable, "-m", "lazymlir.opt", *args], env=env,
                          capture_output=True, text=True)
    return done.returncode, done.stderr.strip().splitlines()


print("TEST: pool_backward$compile")
rc, err = opt(path, "--target=cpu")
print("exit", rc)
print("\n".join(err))
# CHECK-LABEL: TEST: pool_backward$compile
# CHECK: exit 1
# CHECK: lowering stage '[[STAGE:linalg]]' failed at op
# CHECK-SAME: '[[OP:torch.aten._adaptive_avg_pool2d_backward]]' (target cpu):
# CHECK: failed to legalize operation '[[OP]]'
# CHECK: reproduce with: lazymlir-opt --target=cpu --stage=[[STAGE]] {{.*}}lazymlir-repro-[[STAGE]]-

print("TEST: pool_backward$reproducer")
command = err[-1].removeprefix("reproduce with: lazymlir-opt ").split()
rc2, err2 = opt(*command)
print("exit", rc2)
print("same first line:", err2[0] == err[0])
print("\n".join(err2))
# CHECK-LABEL: TEST: pool_backward$reproducer
# CHECK: exit 1
# CHECK: same first line: True
# CHECK: lowering stage '[[STAGE]]' failed at op '[[OP]]' (target cpu):
# CHECK: reproduce with: lazymlir-opt --target=cpu --stage=[[STAGE]]
