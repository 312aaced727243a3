"""Every stage of the registry (lowering/stages.py) has its lit folder, tests/lit/<stage>/,
holding at least one test: a stage added without tests fails here."""

from pathlib import Path

from lazymlir.lowering import stages

LIT = Path(__file__).resolve().parents[2] / "lit"


def _lit_tests(folder: Path) -> list[Path]:
    """The lit tests of `folder`: .mlir and .py files with a RUN line."""
    return [path for path in sorted(folder.glob("*"))
            if path.suffix in (".mlir", ".py") and "RUN:" in path.read_text()]


def test_every_stage_has_a_lit_folder_with_tests():
    names = stages.all_stage_names()
    assert set(names) >= set(stages.PIPELINES["cpu"]) | set(stages.PIPELINES["cuda"])
    missing = [name for name in names if not _lit_tests(LIT / name)]
    assert not missing, (f"stages without lit tests in {LIT}/<stage>/: {', '.join(missing)}")
