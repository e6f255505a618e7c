"""The pages a newcomer reads name only what exists: tests/README.md (the map of the suite) lists every folder of
tests/, every harness module and every marker."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def _tests_readme() -> str:
    return (TESTS / "README.md").read_text()


def test_the_tests_map_lists_every_subject_folder():
    readme = _tests_readme()
    listed = set(re.findall(r"`(\w+)/`", readme))
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    assert "ops" in folders and "harness" in folders
    missing = sorted(folders - listed)
    assert not missing, f"tests/README.md does not say what these folders hold: {missing}"


def test_the_tests_map_lists_every_harness_module():
    readme = _tests_readme()
    modules = {p.name for p in (TESTS / "harness").glob("*.py")
               if not p.name.startswith(("_", "test_"))}
    assert "differential.py" in modules
    missing = sorted(m for m in modules if f"`{m}`" not in readme)
    assert not missing, f"tests/README.md's harness table lacks {missing}"


def test_the_tests_map_lists_every_marker():
    pyproject = (ROOT / "pyproject.toml").read_text()
    block = pyproject[pyproject.index("markers = ["):]
    markers = re.findall(r'^\s*"(\w+):', block[:block.index("]")], re.M)
    assert "slow" in markers
    readme = _tests_readme()
    missing = [m for m in markers if f"| `{m}` |" not in readme]
    assert not missing, f"tests/README.md's marker table lacks {missing}"
