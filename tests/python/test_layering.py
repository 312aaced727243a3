"""The package's import structure: layers one way (import-linter's contracts)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_import_layers_are_one_way(tmp_path):
    """tracing -> execution -> targets -> lowering -> session/support (import-linter).

    The checked tree is the package as installed (lowering/ inside lazymlir/),
    assembled from this checkout so the check reads the sources under test.
    """
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    # import-linter is one of the test extras: without it the contracts go unchecked.
    assert Path(lint).exists(), "import-linter is not installed (pip install '.[test]')"
    root = HERE.parent.parent
    ignore = shutil.ignore_patterns("__pycache__", "_lib")
    shutil.copytree(root / "lazymlir", tmp_path / "lazymlir", ignore=ignore)
    shutil.copytree(root / "lowering", tmp_path / "lazymlir" / "lowering", ignore=ignore)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = subprocess.run([lint, "--config", str(root / ".importlinter")], cwd=tmp_path,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout, done.stdout[-3000:]

