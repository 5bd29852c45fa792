"""The value of a right-hand side in a torchtitan Python configuration, read and not run (for
`planner.inputs.torchtitan_module`, whose `Reader` is an `Expressions`): a literal, a list or
tuple of values, a name bound earlier, `-x`, `a * b`, `a + b` and `a - b` on numbers (bounded by
`MAX_MAGNITUDE`, past it `TooLarge`), or a call, which stands for the record it builds (`Record`:
its callee as the module names it, its arguments' values; a `.Config` or section class given
positions exits 2, as torchtitan's kw_only dataclasses raise). Anything else is `Unread`, an
error naming its line where the plan needs it (`planner.inputs.torchtitan_tables.Document.need`)."""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.torchtitan_baselines import SECTION_CLASSES, Record, Unread


class Expressions:
    """A module's expressions as values: what its imports name (`imports`, local name -> dotted
    origin) and torchtitan's model module where a `model_registry(...)` call names it (`model`)."""

    def __init__(self, path: Path, source: str) -> None:
        self.path, self.source = path, source
        self.imports: dict[str, str] = {}  # local name -> dotted origin
        self.model: str | None = None  # torchtitan's model module, from the baseline or imports

    def fail(self, node: ast.AST, why: str) -> InputError:
        line = getattr(node, "lineno", 0)
        return InputError(f"{self.path}:{line}: {why}")

    def value(self, node: ast.expr, names: dict[str, Any]) -> Any:
        """The node's value: a literal, a Record, or Unread."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(e, names) for e in node.elts]
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.value(node.operand, names)
            if isinstance(inner, TooLarge):
                return inner
            return -inner if _number(inner) else self._unread(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub)):
            a, b = self.value(node.left, names), self.value(node.right, names)
            big = next((v for v in (a, b) if isinstance(v, TooLarge)), None)
            if big is not None:
                return big  # the first number past the bound, with its line
            if not (_number(a) and _number(b)):
                return self._unread(node)
            for operand in (a, b):
                if _too_large(operand):
                    return self._too_large(node, operand)
            if isinstance(node.op, ast.Mult):
                result = a * b
            else:
                result = a + b if isinstance(node.op, ast.Add) else a - b
            return self._too_large(node, result) if _too_large(result) else result
        if isinstance(node, ast.Call):
            written = dotted_name(node.func)
            if written is None or any(k.arg is None for k in node.keywords):
                return self._unread(node)
            callee = self._imported_as(written)
            if callee == "model_registry":
                origin = self.imports.get(written, "")
                if origin.startswith("torchtitan.models."):
                    self.model = origin.split(".")[2]
            last = callee.split(".")[-1]
            if node.args and (last == "Config" or last in SECTION_CLASSES.values()):
                raise self.fail(  # kw_only dataclasses (configs.py, every .Config)
                    node,
                    f"{callee} takes keyword arguments only (torchtitan's kw_only dataclass "
                    f"raises TypeError): {self.text(node)}",
                )
            args = tuple(self.value(a, names) for a in node.args)
            kwargs = {str(k.arg): self.value(k.value, names) for k in node.keywords}
            return Record(callee, args, kwargs, node.lineno, self.text(node))
        return self._unread(node)

    def _too_large(self, node: ast.AST, number: int | float) -> TooLarge:
        """A number past MAX_MAGNITUDE (or not finite) that `node` computes, as a value not
        read: an error naming this line where the plan needs it (`Document.need`), and no
        larger number computed from it (a chain of products, `a2 = a1 * a1`, ..., squared
        its digits at each line)."""
        shown = (
            f"{number:.3g}"
            if isinstance(number, float)
            else f"a number of {abs(number).bit_length():,} bits"
        )
        return TooLarge(
            getattr(node, "lineno", 0),
            f"{self.text(node)}: {shown}, beyond the 2**63 planner computes with (no token "
            "count, degree or batch is that large)",
        )

    def _imported_as(self, written: str) -> str:
        """A callee as its module names it: `from m import FullAC as F` makes `F.Config`
        FullAC.Config (the records are told apart by these names)."""
        head, dot, rest = written.partition(".")
        origin = self.imports.get(head)
        if origin is None or "." not in origin:
            return written
        return origin.rpartition(".")[2] + dot + rest

    def _unread(self, node: ast.AST) -> Unread:
        return Unread(getattr(node, "lineno", 0), self.text(node))

    def text(self, node: ast.AST) -> str:
        """The node's source for a one-line message: its first line, at most 120 characters
        (an `if` block is shown by its `if ...:` line)."""
        text = ast.get_source_segment(self.source, node) or ast.dump(node)
        first = text.splitlines()[0] if text else text
        return first[:120] + (" ..." if first != text else "")


MAX_MAGNITUDE = 2**63
"""The largest magnitude of a number the reader computes (`Expressions.value`'s arithmetic on
literals), or takes as an operand: torchtitan's integer fields are int64 where they reach torch,
and no token budget, degree or batch comes near it. Past it, or not finite, the value is
`TooLarge` (exit 2 naming its line where the plan needs it); `**`, `<<` and the other operators
are not evaluated at all (what the plan needs from them exits 2 as not read)."""


@dataclass(frozen=True)
class TooLarge(Unread):
    """A number past MAX_MAGNITUDE: not read, and carried as is through the arithmetic on it."""


def _too_large(number: int | float) -> bool:
    if isinstance(number, float) and not math.isfinite(number):
        return True
    return abs(number) > MAX_MAGNITUDE


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def dotted_name(node: ast.expr) -> str | None:
    """`a.b.c` of a name or a chain of attributes on one; None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])
