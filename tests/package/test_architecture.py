"""The package's shape: imports run one way (each layer imports only itself and the layers below), no
import cycle exists anywhere, counting imports inside functions, no private name (one leading underscore)
is used across subpackages, and no module is longer than a sanity bound. Read from the source (ast);
nothing is imported or executed."""
import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "torch_tpu"

# Lowest first. A module's layer is that of its first path component under torch_tpu/.
LAYERS = (
    ("config", "errors"),
    ("runtime",),
    ("ops",),
    ("parity",),
    ("engine",),
    ("tensor",),
    ("eager", "compile", "distributed"),
    ("integrations", "testing", "device_module", "device_memory", "_registration", "_internal"),
    ("__init__",),  # the public API re-exports from every layer
    ("cli", "__main__", "demo"),  # programs over the public API
)
MAX_LINES = 1000  # a sanity bound: modules are split by responsibility, not by length
# private names of torch or JAX reached through a torch_tpu module that re-exports them (none today)
ALLOWED_PRIVATE: frozenset = frozenset()


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _is_package(path: pathlib.Path) -> bool:
    return path.name == "__init__.py"


def _imports(name: str, path: pathlib.Path, modules: dict) -> set[str]:
    """Package modules that ``name`` imports (anywhere in the file)."""
    package = name if _is_package(path) else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = []
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.append(sub if sub in modules else source)
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import torch_tpu.x.y` names a module or a parent
                target = target.rpartition(".")[0]
            if target.startswith("torch_tpu") and target != name:
                found.add(target)
    return found


def _graph():
    modules = _modules()
    return modules, {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(name: str) -> int:
    parts = name.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    for rank, names in enumerate(LAYERS):
        if top in names:
            return rank
    raise AssertionError(f"{name}: torch_tpu/{top} is in no layer of tests/test_architecture.py")


def _cycles(graph: dict) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read():
    modules, graph = _graph()
    assert "torch_tpu.eager.op_path" in modules and "torch_tpu.tensor.tensor" in modules
    # a known edge, to prove the reader resolves relative imports
    assert "torch_tpu.tensor.tensor" in graph["torch_tpu.eager.entries"]


def test_no_import_cycle():
    _, graph = _graph()
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_layers_import_only_downwards():
    _, graph = _graph()
    wrong = [f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
             for a, targets in sorted(graph.items()) for b in sorted(targets) if _layer(b) > _layer(a)]
    assert not wrong, "\n".join(wrong)


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _subpackage(name: str, modules: dict) -> str:
    """The subpackage ``name`` belongs to; "" for torch_tpu itself and the modules directly in it."""
    parts = name.split(".")
    if len(parts) == 1 or (len(parts) == 2 and not _is_package(modules[name])):
        return ""
    return parts[1]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in ALLOWED_PRIVATE


def _private_uses(name: str, path: pathlib.Path, modules: dict) -> list[str]:
    """``name``'s uses of private names of other subpackages' modules: imported (``from ..x.y import _z``,
    a private module ``from ..x import _util``), or read as an attribute of an imported module
    (``y._z`` after ``from ..x import y``)."""
    package = name if _is_package(path) else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    bound, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                source = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("torch_tpu"):
                continue
            for alias in node.names:
                target = f"{source}.{alias.name}"
                if target in modules:
                    bound[alias.asname or alias.name] = target
                owner = target if target in modules else source
                private = _private(alias.name) or any(_private(p) for p in source.split(".")[1:])
                if private and _subpackage(owner, modules) != _subpackage(name, modules):
                    found.append(f"line {node.lineno}: from {source} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("torch_tpu") and alias.name in modules:
                    bound[alias.asname or alias.name.split(".")[0]] = alias.asname and alias.name or "torch_tpu"
                    if any(_private(p) for p in alias.name.split(".")[1:]) and \
                            _subpackage(alias.name, modules) != _subpackage(name, modules):
                        found.append(f"line {node.lineno}: import {alias.name}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, value = [node.attr], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in bound:
            continue
        module = bound[value.id]
        for attr in reversed(chain):  # walk down submodules (``torch_tpu.ops.registry._x``)
            if f"{module}.{attr}" in modules:
                module = f"{module}.{attr}"
                continue
            if _private(attr) and _subpackage(module, modules) != _subpackage(name, modules):
                found.append(f"line {node.lineno}: {module}.{attr}")
            break
    return sorted(set(found), key=lambda use: int(use.split(":")[0].split()[1]))


def test_no_private_name_across_subpackages():
    modules = _modules()
    wrong = [f"{name} {use}" for name, path in sorted(modules.items())
             for use in _private_uses(name, path, modules)]
    assert not wrong, "private names used from another subpackage (give them a public name):\n" + "\n".join(wrong)


def test_private_name_finder_finds_them(tmp_path):
    pkg = tmp_path / "torch_tpu"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    for f in ("__init__.py", "a/__init__.py", "b/__init__.py", "a/m.py"):
        (pkg / f).write_text("")
    (pkg / "b" / "n.py").write_text("from ..a import m\nfrom ..a.m import _x, y\nfrom . import _own\n"
                                    "m._z()\nm.w()\nm._y.__name__\nfrom ..a._p import q\n")
    modules = {"torch_tpu": pkg / "__init__.py", "torch_tpu.a": pkg / "a/__init__.py",
               "torch_tpu.b": pkg / "b/__init__.py", "torch_tpu.a.m": pkg / "a/m.py", "torch_tpu.b.n": pkg / "b/n.py"}
    found = _private_uses("torch_tpu.b.n", pkg / "b" / "n.py", modules)
    assert found == ["line 2: from torch_tpu.a.m import _x", "line 4: torch_tpu.a.m._z", "line 6: torch_tpu.a.m._y",
                     "line 7: from torch_tpu.a._p import q"]


def test_cpu_parity_is_reached_through_its_package():
    # the executors call parity's entry points (``parity.check_call`` ...), never its modules: what a check
    # is and where it lives stays inside the package
    _, graph = _graph()
    wrong = [f"{a} imports {b}" for a, targets in sorted(graph.items()) if not a.startswith("torch_tpu.parity")
             for b in sorted(targets) if b.startswith("torch_tpu.parity.")]
    assert not wrong, "\n".join(wrong)


def test_no_module_is_too_long():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


LONG_LINES = 400  # past this, a module says at its top why it is one module


def test_a_long_module_says_why_it_is_one():
    """A module over 400 lines is one a newcomer cannot read at once: its docstring says why it stays one
    ("Why one module: ..."), or it is split by responsibility."""
    silent = {}
    for p in PACKAGE.rglob("*.py"):
        text = p.read_text()
        if (n := len(text.splitlines())) > LONG_LINES and "Why one module:" not in (ast.get_docstring(ast.parse(text)) or ""):
            silent[str(p.relative_to(PACKAGE))] = n
    assert not silent, f"modules over {LONG_LINES} lines without a reason at their top: {silent}"
