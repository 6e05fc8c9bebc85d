"""The import rules of docs/LAYOUT.md: no circles, no import that runs up the layers, and every
in-function import says why it is lazy. Walked with the standard library's `ast`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mlx_edge", "bridges")


def read_layers(doc: Path) -> list[tuple[str, list[str]]]:
    """[(layer, [module prefixes])] from the ```layers block, lowest layer first."""
    match = re.search(r"```layers\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    assert match, f"{doc} has no ```layers block"
    layers = []
    for line in match.group(1).strip().splitlines():
        name, prefixes = line.split(":", 1)
        layers.append((name.strip(), prefixes.split()))
    return layers


def module_names(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted name -> file, for every module of `packages` under `root`."""
    out = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]):
    """(target module, line, in_function, line text) for each internal import of one module."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    lines = source.splitlines()
    top = {id(node) for node in tree.body}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import submodule` imports the submodule
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        text = " ".join(line.strip() for line in lines[node.lineno - 1 : node.end_lineno])
        for target in dict.fromkeys(targets):
            yield target, node.lineno, id(node) not in top, text


def layer_of(module: str, layers) -> int | None:
    best, index = -1, None
    for i, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, index = len(prefix), i
    return index


def resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The internal module `target` names (the longest known prefix), or None for third-party code."""
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def find_problems(root: Path, layers) -> dict[str, list[str]]:
    """{"circles": [...], "upward": [...], "unlayered": [...], "lazy": [...]} for the tree at `root`."""
    modules = module_names(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    problems = {"circles": [], "upward": [], "unlayered": [], "lazy": []}
    for name, path in modules.items():
        source_name = f"{name}.__init__" if name in PACKAGES else name
        own = layer_of(source_name, layers)
        if own is None:
            problems["unlayered"].append(name)
        for target, line, in_function, text in imports_of(name, path, modules):
            if in_function and "# lazy:" not in text:
                problems["lazy"].append(f"{path.relative_to(root)}:{line}: {text.strip()}")
            internal = resolve(target, modules)
            if internal is None or internal in PACKAGES:  # third-party, or a package root (see LAYOUT.md)
                continue
            graph[name].add(internal)
            theirs = layer_of(internal, layers)
            if own is not None and theirs is not None and theirs > own:
                problems["upward"].append(
                    f"{name} ({layers[own][0]}) imports {internal} ({layers[theirs][0]}), line {line}"
                )
    problems["circles"] = [" -> ".join(c) for c in cycles(graph)]
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


LAYERS = read_layers(ROOT / "docs" / "LAYOUT.md")


@pytest.fixture(scope="module")
def problems():
    return find_problems(ROOT, LAYERS)


def test_no_import_circles(problems):
    assert problems["circles"] == []


def test_no_import_runs_up_the_layers(problems):
    assert problems["upward"] == []


def test_every_module_has_a_layer(problems):
    assert problems["unlayered"] == []


def test_every_in_function_import_says_why(problems):
    assert problems["lazy"] == []


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_catches_a_circle_an_upward_import_and_an_unexplained_lazy_import(tmp_path):
    """The same checker on a small tree made here, one rule broken at a time."""
    clean = {
        "mlx_edge/__init__.py": "",
        "mlx_edge/errors.py": "",
        "bridges/__init__.py": "",
        "mlx_edge/data.py": "from mlx_edge.errors import x\n",
        "bridges/conv.py": "from mlx_edge import data\n\n\ndef f():\n    import torch  # lazy: heavy\n",
    }
    _write(tmp_path, clean)
    assert find_problems(tmp_path, LAYERS) == {"circles": [], "upward": [], "unlayered": [], "lazy": []}

    _write(
        tmp_path,
        {
            "mlx_edge/errors.py": "from mlx_edge.fileio import y\n",
            "mlx_edge/fileio.py": "from mlx_edge import errors\n",
        },
    )
    assert find_problems(tmp_path, LAYERS)["circles"] == ["mlx_edge.errors -> mlx_edge.fileio"]

    _write(
        tmp_path,
        {"mlx_edge/errors.py": "", "mlx_edge/data.py": "def g():\n    from bridges.conv import f  # lazy: x\n"},
    )
    found = find_problems(tmp_path, LAYERS)
    assert found["circles"] == ["bridges.conv -> mlx_edge.data"]  # an in-function import still counts
    assert found["upward"] == ["mlx_edge.data (data) imports bridges.conv (bridges), line 2"]

    _write(tmp_path, {"mlx_edge/data.py": "def g():\n    import numpy\n", "mlx_edge/extra.py": ""})
    found = find_problems(tmp_path, LAYERS)
    assert found["lazy"] == ["mlx_edge/data.py:2: import numpy"] and found["unlayered"] == ["mlx_edge.extra"]


def imports_of_test_modules(source: str) -> list[int]:
    """Lines of `source` that import a test module (test_*) or conftest, by any spelling."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = [module] + [f"{module}.{alias.name}".lstrip(".") for alias in node.names]
        else:
            continue
        heads = {name.removeprefix("tests.").split(".")[0] for name in names}
        if any(head.startswith("test_") or head == "conftest" for head in heads):
            lines.append(node.lineno)
    return lines


def test_no_test_file_imports_another_test_file_or_conftest():
    """Shared code lives in tests/helpers/, fixtures in conftest.py: a test file imported by another
    ties the two together, and under a second name (tests.test_x) is loaded twice."""
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if (lines := imports_of_test_modules(path.read_text(encoding="utf-8")))
    }
    assert found == {}, "import from tests/helpers/ instead"


# (module, name) for `from module import name`, or (module, None) for `import module`; written apart
# so that a grep for test-to-test imports over tests/ finds none here
@pytest.mark.parametrize(
    "module, name",
    [
        ("tests.test_cli_errors", "x"),
        ("test_cli_errors", "x"),
        ("tests.test_data", None),
        ("tests", "test_data"),
        ("tests.conftest", "x"),
        ("conftest", "x"),
        (".", "conftest"),
    ],
)
def test_the_test_import_checker_catches(module, name):
    line = f"from {module} import {name}" if name else f"import {module}"
    assert imports_of_test_modules(f"import os\nfrom tests.helpers.tiny import x\n{line}\n") == [3]
