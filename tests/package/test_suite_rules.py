"""The suite's own rules, read from its source (no test module is imported): a test that breaks one stays green
when the code it tests is wrong.

* Every ``pytest.mark.parametrize`` argument is used by the test it parametrizes (on the function, its class or
  the module's ``pytestmark``): a parameter the body never reads runs the same body once per value, and the
  cases it names are not tested.
* No ``pytest.raises(Exception)`` (or ``BaseException``): it passes on any error, a crash of the test's own code
  too; the class the error must have (CPU torch's) is named.
* Every xfail is strict and pinned to the failure it expects (``raises=`` or a ``match`` of its message through
  the harness): a case that starts failing in another way is no longer the known gap.
* No assertion on wall-clock time: a loaded machine fails it, and a fast one passes a hang; speed is measured in
  ``bench/`` as ratios, and the suite asserts orderings and events.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "mutation" not in p.parts)


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return ""


def _parametrize_names(decorator) -> list[str] | None:
    """The argument names a ``pytest.mark.parametrize(...)`` decorator gives (None: not one, or indirect)."""
    if not isinstance(decorator, ast.Call) or not _dotted(decorator.func).endswith("mark.parametrize"):
        return None
    if any(k.arg == "indirect" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
           for k in decorator.keywords):
        return None  # the values go to fixtures of those names
    names = decorator.args[0] if decorator.args else next(
        (k.value for k in decorator.keywords if k.arg == "argnames"), None)
    if isinstance(names, ast.Constant) and isinstance(names.value, str):
        return [n.strip() for n in names.value.split(",") if n.strip()]
    if isinstance(names, (ast.List, ast.Tuple)):
        return [e.value for e in names.elts if isinstance(e, ast.Constant)]
    return None


def _marks(node) -> list:
    """``pytestmark = ...`` of a module or class body, as a list of expressions."""
    out = []
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in stmt.targets):
            v = stmt.value
            out.extend(v.elts if isinstance(v, (ast.List, ast.Tuple)) else [v])
    return out


def _names_read(fn) -> set[str]:
    """Every name the function's body (not its decorators or defaults) reads, nested functions included."""
    body = ast.Module(body=fn.body, type_ignores=[])
    return {n.id for n in ast.walk(body) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)}


def _unused_parameters(tree: ast.Module, path: Path) -> list[str]:
    problems = []
    module_names = [n for m in _marks(tree) for n in (_parametrize_names(m) or [])]

    def check(fn, inherited, where):
        if not fn.name.startswith("test"):
            return
        own = [n for d in fn.decorator_list for n in (_parametrize_names(d) or [])]
        read = _names_read(fn)
        for name in own + inherited:
            if name not in read:
                problems.append(f"{path.relative_to(TESTS.parent)}:{fn.lineno} {where}{fn.name}: "
                                f"parameter {name!r} is never used")

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            check(node, module_names, "")
        elif isinstance(node, ast.ClassDef):
            cls_names = [n for d in node.decorator_list for n in (_parametrize_names(d) or [])]
            cls_names += [n for m in _marks(node) for n in (_parametrize_names(m) or [])]
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    check(item, module_names + cls_names, f"{node.name}.")
    return problems


def test_every_parametrize_argument_is_used_by_its_test():
    problems = [p for path in _test_files() for p in _unused_parameters(_parse(path), path)]
    assert not problems, "\n".join(problems)


_ANY_ERROR = {"Exception", "BaseException"}


def _catches_anything(call: ast.Call) -> bool:
    if not call.args:
        return False
    first = call.args[0]
    classes = first.elts if isinstance(first, ast.Tuple) else [first]
    return any(isinstance(c, ast.Name) and c.id in _ANY_ERROR for c in classes)


def test_no_test_expects_any_exception():
    problems = []
    for path in _test_files() + sorted((TESTS / "harness").glob("*.py")):  # the harness's modules too
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Call) and _dotted(node.func) == "pytest.raises" and _catches_anything(node):
                problems.append(f"{path.relative_to(TESTS.parent)}:{node.lineno}: pytest.raises(Exception): name the "
                                f"class CPU torch raises")
    assert not problems, "\n".join(problems)


def _xfail_calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func) in ("pytest.mark.xfail", "mark.xfail"):
            yield node


def test_every_xfail_is_strict_and_pinned_to_its_error():
    problems = []
    for path in sorted(TESTS.rglob("*.py")):
        for call in _xfail_calls(_parse(path)):
            kw = {k.arg: k.value for k in call.keywords}
            strict = isinstance(kw.get("strict"), ast.Constant) and kw["strict"].value is True
            if not strict or "raises" not in kw:
                problems.append(f"{path.relative_to(TESTS.parent)}:{call.lineno}: xfail without strict=True and "
                                f"raises=<the error it expects>")
    assert not problems, "\n".join(problems)


_CLOCKS = {"time.time", "time.perf_counter", "time.monotonic", "time.time_ns", "time.perf_counter_ns",
           "time.monotonic_ns", "perf_counter", "monotonic"}


def _wall_clock_asserts(tree: ast.Module) -> list[int]:
    """Lines of ``assert`` statements (or pytest/unittest comparisons) that read a clock, directly or through a
    name assigned from one (or from arithmetic on such names) in the same function."""
    lines = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        timed: set[str] = set()
        for _ in range(3):  # names computed from timed names (elapsed = t1 - t0)
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and _reads_clock(node.value, timed):
                    timed |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assert) and _reads_clock(node.test, timed):
                lines.append(node.lineno)
    return lines


def _reads_clock(expr, timed: set[str]) -> bool:
    for n in ast.walk(expr):
        if isinstance(n, ast.Call) and _dotted(n.func) in _CLOCKS:
            return True
        if isinstance(n, ast.Name) and n.id in timed:
            return True
    return False


def test_no_assertion_on_wall_clock_time():
    problems = [f"{path.relative_to(TESTS.parent)}:{line}: an assertion on wall-clock time"
                for path in _test_files() for line in _wall_clock_asserts(_parse(path))]
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------------------------------------
# the checks themselves, on small sources: each finds what it must and nothing else

def _source_problems(src: str) -> list[str]:
    return _unused_parameters(ast.parse(src), TESTS / "x" / "test_x.py")


@pytest.mark.parametrize("src, unused", [
    ("@pytest.mark.parametrize('a', [1, 2])\ndef test_f(a):\n    assert a", []),
    ("@pytest.mark.parametrize('a', [1, 2])\ndef test_f(a):\n    assert True", ["'a'"]),
    ("@pytest.mark.parametrize('a, b', [(1, 2)])\ndef test_f(a, b):\n    g = lambda: b\n    assert a and g()", []),
    ("@pytest.mark.parametrize(('a', 'b'), [(1, 2)])\ndef test_f(a, b):\n    assert a", ["'b'"]),
    ("@pytest.mark.parametrize('a', [1], indirect=True)\ndef test_f(a):\n    pass", []),
    ("pytestmark = pytest.mark.parametrize('m', [1])\ndef test_f(m):\n    pass", ["'m'"]),
    ("@pytest.mark.parametrize('c', [1])\nclass TestC:\n    def test_f(self, c):\n        pass", ["'c'"]),
])
def test_the_parameter_check_finds_unused_ones(src, unused):
    problems = _source_problems(src)
    assert len(problems) == len(unused) and all(u in p for u, p in zip(unused, problems)), problems


@pytest.mark.parametrize("src, lines", [
    ("def test_f():\n    t0 = time.perf_counter()\n    work()\n    assert time.perf_counter() - t0 < 5", [4]),
    ("def test_f():\n    t0 = time.monotonic()\n    dt = time.monotonic() - t0\n    assert dt < 1.0", [4]),
    ("def test_f():\n    t0 = time.monotonic()\n    assert work() == 3", []),
])
def test_the_clock_check_finds_timed_asserts(src, lines):
    assert _wall_clock_asserts(ast.parse(src)) == lines


def test_every_mutant_of_the_mutation_check_still_applies():
    """tests/mutation/run.py changes each mutant's line in a copy of the package: a line the code no longer
    holds (moved, reworded) would leave the mutant untested. Update ``mutants.py`` with the code."""
    import sys

    sys.path.insert(0, str(TESTS / "mutation"))
    try:
        from mutants import MUTANTS
    finally:
        sys.path.remove(str(TESTS / "mutation"))
    stale = [f"{m.name}: {m.file} holds {m.line!r} {(TESTS.parent / m.file).read_text().count(m.line)} times"
             for m in MUTANTS if (TESTS.parent / m.file).read_text().count(m.line) != 1]
    assert not stale, "\n".join(stale)
    assert len({m.name for m in MUTANTS}) == len(MUTANTS), "two mutants share a name"
