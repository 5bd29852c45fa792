"""Values of Megatron-LM flags that are small expressions: per-layer patterns.

`--moe-layer-freq` (and its kin `--no-rope-freq`, `--linear-attention-freq`) is an integer N
(every N-th layer, starting with the first) or, when the text holds a "[", a Python list
expression that Megatron evaluates (Megatron-LM d98e8a64 arguments.py `moe_freq_type`), e.g.
"[0]*3+[1]*58", "([0]*3+[1]*58)" as the functional tests write it, or "([1]*3+[0]*2)*2". This
module evaluates that expression language itself, without `eval`: integers, lists `[a, b, ...]`,
parentheses, `+` (concatenation, or sum of integers) and `*` (repetition, or product).
"""

from __future__ import annotations

import re

from planner.inputs.errors import InputError

_TOKEN = re.compile(r"\s*(?:(\d+)|(.))")
MAX_PATTERN = 1 << 16
"""Entries a pattern may expand to: far above any layer count (arch_fields.MAX_LAYERS is
10,000), and small enough that "[0]*10**9" style typos fail at once instead of filling memory."""

Value = int | list[int]


class _Parser:
    def __init__(self, text: str, where: str) -> None:
        self.text, self.where = text, where
        self.tokens: list[str] = []
        for m in _TOKEN.finditer(text):
            if m.group(1) or m.group(2):
                self.tokens.append(m.group(1) or m.group(2))
        self.pos = 0

    def fail(self, why: str) -> InputError:
        return InputError(f"{self.where}: cannot read {self.text!r}: {why}")

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise self.fail(f"expected {expected or 'more'} at token {self.pos + 1}")
        self.pos += 1
        return tok

    def expr(self) -> Value:
        value = self.term()
        while self.peek() == "+":
            self.take("+")
            right = self.term()
            if isinstance(value, int) and isinstance(right, int):
                value = value + right
            elif isinstance(value, list) and isinstance(right, list):
                value = [*value, *right]
            else:
                raise self.fail("'+' joins two lists or two integers")
            self._bound(value)
        return value

    def term(self) -> Value:
        value = self.factor()
        while self.peek() == "*":
            self.take("*")
            right = self.factor()
            if isinstance(value, int) and isinstance(right, int):
                value = value * right
            elif isinstance(value, list) and isinstance(right, int):
                self._bound(len(value) * right)
                value = value * right
            elif isinstance(value, int) and isinstance(right, list):
                self._bound(len(right) * value)
                value = right * value
            else:
                raise self.fail("'*' repeats a list by an integer")
        return value

    def factor(self) -> Value:
        tok = self.take()
        if tok.isdecimal():
            return int(tok)
        if tok == "(":
            value = self.expr()
            self.take(")")
            return value
        if tok == "[":
            items: list[int] = []
            while self.peek() != "]":
                item = self.expr()
                if not isinstance(item, int):
                    raise self.fail("list entries are integers")
                items.append(item)
                if self.peek() != "]":
                    self.take(",")
            self.take("]")
            return items
        raise self.fail(f"unexpected {tok!r}")

    def _bound(self, value: Value) -> None:
        size = value if isinstance(value, int) else len(value)
        if size > MAX_PATTERN:
            raise self.fail(f"more than {MAX_PATTERN:,} entries")


def layer_pattern(text: str, where: str) -> int | list[int]:
    """An integer N, or the 0/1 list a pattern expression evaluates to. `where` names the file
    and flag in messages."""
    stripped = text.strip()
    if "[" not in stripped:
        if not stripped.isdecimal():
            raise InputError(f"{where}: expected an integer or a list expression (got {text!r})")
        return int(stripped)
    parser = _Parser(stripped, where)
    value = parser.expr()
    if parser.peek() is not None:
        raise parser.fail(f"unexpected {parser.peek()!r} after the expression")
    if not isinstance(value, list):
        raise parser.fail("expected a list")
    if set(value) - {0, 1}:
        raise parser.fail("entries must be 0 or 1")
    return value
