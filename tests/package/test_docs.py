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


# --- module and file paths the docs name ----------------------------------------------------------------
DOCS = ("README.md", "docs/architecture.md", "docs/distributed.md", "bench/README.md", "tests/README.md")
SUBPACKAGES = ("runtime", "ops", "parity", "engine", "tensor", "eager", "compile", "distributed", "integrations",
               "testing", "demo", "cli", "_internal")
# `ops/linalg.py`, `torch_tpu/engine/fused.py`, `ops/_util.exact_integer_products` (a module, then a name in it)
_MODULE = re.compile(r"(?<![\w/.-])(?:torch_tpu/)?((?:%s)/[\w/]*\w)(\.py)?" % "|".join(SUBPACKAGES))
_TOP_MODULE = re.compile(r"(?<![\w/.-])torch_tpu/(\w+)\.py")
# `bench/bench_ops.py`, `tests/ops/test_linalg.py`, `bench/results/tpu/probe.json`, `scripts/setup.sh`
_FILE = re.compile(r"(?<![\w/.-])((?:bench|tests|scripts|examples|docs)/[\w/.-]*\w)")
_PLACEHOLDER = re.compile(r"[A-Z]{3,}|\*")  # tests/FILE.py, bench/results/NAME.json, device_ops_*.json


def _module_exists(path: str) -> bool:
    if path.rpartition("/")[2].startswith("test_"):  # a test file named from tests/ (`ops/test_linalg.py`)
        return (TESTS / path).with_suffix(".py").is_file()
    base = ROOT / "torch_tpu" / path
    return base.with_suffix(".py").is_file() or base.is_dir() or base.is_file()


def _missing(text: str) -> list:
    missing = []
    for m in _MODULE.finditer(text):
        if not _module_exists(m.group(1)):
            missing.append(m.group(0))
    for m in _TOP_MODULE.finditer(text):
        if not (ROOT / "torch_tpu" / f"{m.group(1)}.py").is_file():
            missing.append(m.group(0))
    for m in _FILE.finditer(text):
        path = m.group(1)
        follows = text[m.end():m.end() + 1]
        if _PLACEHOLDER.search(path) or follows in "*{":
            continue
        if not (ROOT / path).exists():
            missing.append(path)
    return sorted(set(missing))


def test_the_docs_name_only_modules_and_files_that_exist():
    """A module renamed or removed leaves docs that send a newcomer to nothing (the compile package's docs
    named a ``compile_cache`` module long gone)."""
    wrong = {doc: missing for doc in DOCS if (missing := _missing((ROOT / doc).read_text()))}
    assert not wrong, f"the docs name paths that do not exist: {wrong}"


def test_the_path_reader_finds_what_is_missing():
    text = ("see `ops/linalg.py`, `ops/_util.torch_operands`, torch_tpu/engine/fused.py, `compile/compile_cache.py`, "
            "`engine/gone`, `bench/no_such.py`, `tests/ops/test_linalg.py`, `tests/FILE.py`, "
            "`bench/results/tpu/device_ops_*.json`, torch_tpu/nothing.py, `ops/test_op_backward.py`, `ops/test_gone.py`")
    assert _missing(text) == ["`bench/no_such.py`"[1:-1], "compile/compile_cache.py", "engine/gone",
                              "ops/test_gone.py", "torch_tpu/nothing.py"]
