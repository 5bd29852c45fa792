"""The package layers import only downward, without cycles, and the heavy dependencies stay in
their layer (DESIGN.md section 3).

Oracle: every `import` statement of planner's source, read with `ast` (imports inside functions
count too), against the layer order below; and, so that the checks themselves can fail, the same
checks on small made-up sources that break each rule.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from paths import REPO

PACKAGE = REPO / "planner"

LAYERS = ("inputs", "model", "ops", "search", "calibration", "emit", "cli")
"""Bottom to top: a module may import its own layer and the layers before it."""

ONLY_IN = {
    "ortools": ("planner.search.solver",),
    "typer": ("planner.cli",),
    "rich": ("planner.cli",),
}
"""Third-party packages and the module (or package) that alone may import them."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> dict[str, str]:
    return {module_name(p): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def imports(source: str, known: set[str] | dict[str, str]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in the source. `from a import b` yields a.b
    when a.b is one of the `known` modules (a sub-module), else a."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield (sub if sub in known else node.module), node.lineno


def layer(module: str) -> int | None:
    """The layer of a planner module (None: the package root, planner and planner.__main__)."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def upward_imports(srcs: dict[str, str]) -> list[str]:
    """'a imports b (line n)' wherever a lower layer imports a higher one."""
    bad = []
    for mod, src in srcs.items():
        here = layer(mod)
        for target, line in imports(src, srcs):
            if not target.startswith("planner.") or here is None:
                continue
            there = layer(target)
            if there is not None and there > here:
                bad.append(f"{mod} imports {target} (line {line})")
    return bad


def misplaced_dependencies(srcs: dict[str, str]) -> list[str]:
    """'a imports typer' wherever a package of ONLY_IN is imported outside its module."""
    bad = []
    for mod, src in srcs.items():
        for target, line in imports(src, srcs):
            top = target.split(".")[0]
            allowed = ONLY_IN.get(top)
            if allowed and not any(mod == a or mod.startswith(a + ".") for a in allowed):
                bad.append(f"{mod} imports {target} (line {line})")
    return bad


def cycles(srcs: dict[str, str]) -> list[list[str]]:
    """Every import cycle between planner modules (depth-first search on the import graph)."""
    graph = {
        mod: sorted({t for t, _ in imports(src, srcs) if t in srcs and t != mod})
        for mod, src in srcs.items()
    }
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for nxt in graph[mod]:
            if state.get(nxt) == 1:
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[mod] = 2

    for mod in graph:
        if mod not in state:
            visit(mod, [mod])
    return found


def private_reaches(srcs: dict[str, str]) -> list[str]:
    """'a uses b._c' wherever a module uses another module's private name."""
    bad = []
    for mod, src in srcs.items():
        tree = ast.parse(src)
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("planner")
            ):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        bad.append(f"{mod} imports {node.module}.{alias.name}")
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                bad.append(f"{mod} uses {aliases[node.value.id]}.{node.attr}")
    return bad


SOURCES = sources()


def test_every_module_sits_in_a_layer() -> None:
    loose = [m for m in SOURCES if layer(m) is None]
    assert sorted(loose) == ["planner", "planner.__main__"]


def test_layers_import_only_downward() -> None:
    assert upward_imports(SOURCES) == []


def test_no_import_cycles() -> None:
    assert cycles(SOURCES) == []


def test_heavy_dependencies_stay_in_their_layer() -> None:
    assert misplaced_dependencies(SOURCES) == []


def test_no_module_reaches_into_another_modules_private_names() -> None:
    assert private_reaches(SOURCES) == []


def test_every_package_says_what_it_owns_and_may_import() -> None:
    for name in LAYERS:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
        assert doc, f"planner/{name}/__init__.py has no docstring"
        lower = LAYERS[: LAYERS.index(name)]
        if lower:  # it names each layer it may import
            assert all(f"planner.{low}" in doc or low in doc for low in lower), name
        else:
            assert "imports nothing" in doc


# --- the checks themselves, on sources made to break each rule


FAKE = {
    "planner.inputs.a": "from planner.model import b\n",  # upward
    "planner.model.b": "import typer\nfrom planner.inputs import a\n",  # typer; a cycle
    "planner.search.solver": "from ortools.sat.python import cp_model\n",
    "planner.search.c": "from planner.model import b\nb._hidden()\n",  # a private name
    "planner.cli.d": "import rich\nfrom planner.search import solver\n",
}
"""Made-up modules, each line breaking a rule or keeping one (ortools in the solver, rich in the
command line, an upward-free cli import)."""


def test_the_checks_catch_what_they_look_for() -> None:
    fake = FAKE
    assert upward_imports(fake) == ["planner.inputs.a imports planner.model.b (line 1)"]
    assert misplaced_dependencies(fake) == ["planner.model.b imports typer (line 1)"]
    assert cycles(fake) == [["planner.inputs.a", "planner.model.b", "planner.inputs.a"]]
    assert private_reaches(fake) == ["planner.search.c uses planner.model.b._hidden"]
