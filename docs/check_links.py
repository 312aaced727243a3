"""Check that every relative link and repository path in the README and docs resolves.

    python docs/check_links.py [--root DIR]...

Reads README.md, CHANGELOG.md, dialects/README.md, benchmarks/results/README.md and
docs/*.md; collects markdown link targets and backquoted or bare paths under the
repository's top-level folders (lowering/, lazymlir/, tests/, benchmarks/, docs/,
scripts/, cuda_runtime/, dialects/), and reports each one that exists under none of the
roots (the repository by default; more roots let a path resolve in another checkout,
e.g. while a move is under way). Also reports every file in benchmarks/results/ that no
document cites (the index aside), so results stay exactly the cited ones. Exits 1 on
any problem.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = ["README.md", "CHANGELOG.md", "dialects/README.md", "benchmarks/results/README.md",
        *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]
TOP = ("lowering", "lazymlir", "tests", "benchmarks", "docs", "scripts", "cuda_runtime",
       "dialects")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PATH = re.compile(r"(?<![\w./<-])((?:" + "|".join(TOP) + r")/[\w./-]*[\w/])")


def _candidates(doc: str, text: str) -> set[tuple[str, str]]:
    """(as written, repository-relative path) of every link and path in `text`."""
    found = set()
    base = Path(doc).parent
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        found.add((target, str(Path(os.path.normpath(base / target)))))
    for path in PATH.findall(text):
        if "<" in path or "*" in path:
            continue
        found.add((path, path.rstrip("/")))
    return found


def _exists(path: str, roots: list[Path]) -> bool:
    if path.startswith("lazymlir/_lib"):  # the build's output folder, not in git
        return True
    if path.startswith("lazymlir/lowering"):
        path = path.replace("lazymlir/lowering", "lowering", 1)
    return any((root / path).exists() for root in roots)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", action="append", default=[], type=Path,
                        help="another checkout to resolve paths in (repeatable)")
    args = parser.parse_args(argv)
    roots = [REPO, *args.root]
    problems = []
    cited = set()
    for doc in DOCS:
        text = (REPO / doc).read_text()
        for written, path in sorted(_candidates(doc, text)):
            cited.add(path)
            if not _exists(path, roots):
                problems.append(f"{doc}: {written} does not resolve")
    results = REPO / "benchmarks" / "results"
    for file in sorted(results.rglob("*")):
        rel = str(file.relative_to(REPO))
        if file.is_file() and file.name != "README.md" and rel not in cited:
            problems.append(f"{rel}: cited by no document")
    print("\n".join(problems) or f"ok: {len(cited)} paths in {len(DOCS)} documents")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
