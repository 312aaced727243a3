"""The README's and docs' links and repository paths resolve, and benchmarks/results/
holds exactly the results the docs cite (docs/check_links.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_doc_link_and_path_resolves_and_every_result_is_cited():
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "check_links.py")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
