"""The checker of planner launch --target torchtitan-module's Python configuration against
torchtitan's schema (check_module), shared by the tests of that target.

Oracle: tests/data/torchtitan_config_schema.json (the modules, classes with their annotated
fields and bases, and functions with their parameters of pytorch/torchtitan at the commit it
names, derived with Python's ast by benchmarks/torchtitan_schema.py): every import of the emitted
module must name what that module defines or imports, every `config.a.b = ...` a field along the
annotated types from Trainer.Config, every keyword of a call a field of the class or a parameter
of the function called, every string given to a Literal field one of its values.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from paths import TESTS

from planner.emit import torchtitan_module

SCHEMA = json.loads((TESTS / "data" / "torchtitan_config_schema.json").read_text())
MODULES: dict[str, Any] = SCHEMA["modules"]


# --- the schema resolver --------------------------------------------------------------------


def _resolve(module: str, name: str) -> tuple[str, str, str]:
    """(module, qualified name, kind) of `name` as `module` sees it, through its imports."""
    head, _, rest = name.partition(".")
    entry = MODULES[module]["names"].get(head)
    assert entry is not None, f"{module} has no name {head!r}"
    if entry in ("class", "function", "variable"):
        kind = "class" if name in MODULES[module]["classes"] else entry
        return module, name, kind
    origin, _, original = entry.partition(":")
    assert origin in MODULES, f"{name} comes from {origin}, which the schema does not hold"
    return _resolve(origin, original + (f".{rest}" if rest else ""))


def _fields(module: str, cls: str) -> dict[str, tuple[str, str]]:
    """A class's annotated fields with those of its bases: name -> (module, annotation)."""
    info = MODULES[module]["classes"][cls]
    out: dict[str, tuple[str, str]] = {}
    for base in info["bases"]:
        try:
            bmod, bname, kind = _resolve(module, base)
        except AssertionError:
            continue  # a base outside the schema (Stateful, ABC): no dataclass fields
        if kind == "class":
            out.update(_fields(bmod, bname))
    out.update({f: (module, a) for f, a in info["fields"].items()})
    return out


def _class_of(module: str, annotation: str) -> tuple[str, str]:
    """The schema class an annotation names (the first name in it that resolves to one)."""
    for node in ast.walk(ast.parse(annotation, mode="eval")):
        if isinstance(node, ast.Name | ast.Attribute):
            text = ast.unparse(node)
            try:
                m, q, kind = _resolve(module, text)
            except (AssertionError, KeyError):
                continue
            if kind == "class":
                return m, q
    raise AssertionError(f"no class of the schema in {annotation!r}")


def _literal(annotation: str) -> set[object] | None:
    """The values a Literal annotation allows (None: no Literal in it)."""
    for node in ast.walk(ast.parse(annotation, mode="eval")):
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return {ast.literal_eval(e) for e in elts}
    return None


def _check_value(module: str, annotation: str, value: ast.expr, where: str) -> None:
    allowed = _literal(annotation)
    if allowed is not None and isinstance(value, ast.Constant) and isinstance(value.value, str):
        assert value.value in allowed, f"{where}: {value.value!r} not in {sorted(allowed)}"


def check_module(text: str) -> None:
    """The emitted module against the schema (module docstring)."""
    tree = ast.parse(text)
    names: dict[str, tuple[str, str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            assert node.module in MODULES, f"import from {node.module}: not in the schema"
            for alias in node.names:
                names[alias.asname or alias.name] = _resolve(node.module, alias.name)
    (function,) = (n for n in tree.body if isinstance(n, ast.FunctionDef))
    assert function.name == torchtitan_module.FUNCTION and not function.args.args
    trainer = ("torchtitan.trainer", "Trainer.Config")

    def target(name: str) -> tuple[str, str, str]:
        head, _, rest = name.partition(".")
        mod, qual, kind = names[head]
        return (mod, f"{qual}.{rest}", "class") if rest else (mod, qual, kind)

    for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
        mod, qual, kind = target(ast.unparse(call.func))
        if kind == "class":
            fields = _fields(mod, qual)
            for kw in call.keywords:
                assert kw.arg in fields, f"{qual}({kw.arg}=...): no such field"
                _check_value(fields[kw.arg][0], fields[kw.arg][1], kw.value, f"{qual}.{kw.arg}")
        else:
            params = MODULES[mod]["functions"][qual]
            assert not call.args or len(call.args) <= len(params)
            for kw in call.keywords:
                assert kw.arg in params, f"{qual}({kw.arg}=...): no such parameter"
    for node in ast.walk(function):
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute)):
            continue
        path = ast.unparse(node.targets[0]).split(".")
        assert path[0] == "config", path
        mod, cls = trainer
        for i, attr in enumerate(path[1:], 1):
            fields = _fields(mod, cls)
            assert attr in fields, f"{'.'.join(path[:i])}.{attr}: no such field of {cls}"
            fmod, annotation = fields[attr]
            if i == len(path) - 1:
                _check_value(fmod, annotation, node.value, ".".join(path))
            else:
                mod, cls = _class_of(fmod, annotation)
