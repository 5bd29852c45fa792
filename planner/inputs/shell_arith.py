"""bash's integer arithmetic (`$(( ... ))`) for `planner.inputs.shell_expand`.

bash (5.2, the ARITHMETIC EVALUATION section of its manual) evaluates in signed 64-bit integers,
with C's operators and precedence, from the tightest: unary `-` `+`, `!` `~`; `**` (right to
left); `*` `/` `%`; `+` `-`; `<<` `>>`; `<` `<=` `>` `>=`; `==` `!=`; `&`; `^`; `|`; `&&`; `||`;
`?:`. Its constants are decimal, `0x` hex, `0` octal and `base#digits`. `/` and `%` truncate
toward zero (C); a division by 0 and a negative exponent are errors, on which bash stops the
script. `-2 ** 2` is 4 in bash (Python's -4) and `1 & 2 == 2` is 1 (Python's False): the
precedence is bash's, not Python's.

What planner does not evaluate raises `Unknown` with the reason, and the expansion keeps its
text: a name left in the expression (a variable the file does not set), a result past 64 bits
(bash wraps it around: the reason gives bash's value), a division by 0 or a negative exponent
(bash stops there), assignments, `++` / `--` and the comma operator.
"""

from __future__ import annotations

import re
from collections.abc import Callable

BITS = 64
_MOD = 1 << BITS
_MIN, _MAX = -(1 << (BITS - 1)), (1 << (BITS - 1)) - 1

MAX_CHARS = 1000
"""The longest expression evaluated: a launch script's are a few dozen characters; a fuzzer's
10,000 unary minus signs would nest past Python's recursion."""


class Unknown(ValueError):
    """An expression planner does not evaluate; the message says why."""


_TOKEN = re.compile(
    r"\s*(?:(?P<num>[0-9]+#[0-9A-Za-z@_]+|0[xX][0-9A-Fa-f]+|[0-9]+)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>\*\*|<<|>>|<=|>=|==|!=|&&|\|\||\+\+|--|[-+*/%<>&|^~!?:()=,]))"
)

_BINARY: list[tuple[str, ...]] = [
    ("||",),
    ("&&",),
    ("|",),
    ("^",),
    ("&",),
    ("==", "!="),
    ("<", "<=", ">", ">="),
    ("<<", ">>"),
    ("+", "-"),
    ("*", "/", "%"),
]
"""bash's binary operators from the loosest to the tightest (`**` and the unary ones below)."""

Node = int | tuple


def _wrap(value: int) -> int:
    return (value - _MIN) % _MOD + _MIN


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        m = _TOKEN.match(text, i)
        if m is None or m.end() == i:
            if text[i:].strip():
                raise Unknown(f"{text[i:].strip()[:20]!r} is not arithmetic planner evaluates")
            break
        kind = m.lastgroup
        word = m.group(kind) if kind else ""
        if kind == "name":
            raise Unknown(f"over {word}, a variable the file does not set to an integer")
        if word in ("++", "--", "=", ","):
            raise Unknown(f"{word!r} (assignment, increment, comma): planner does not evaluate it")
        out.append(word)
        i = m.end()
    return out


def _number(word: str) -> int:
    """A constant as bash reads it; Unknown where bash refuses it (a digit past its base)."""
    if "#" in word:
        base_text, digits = word.split("#", 1)
        base = int(base_text)
        if not 2 <= base <= 64:
            raise Unknown(f"{word!r}: bash refuses the base (2 to 64)")
        value = 0
        for ch in digits:
            if ch.isdigit():
                d = int(ch)
            elif base <= 36 and ch.isalpha():
                d = ord(ch.lower()) - ord("a") + 10
            elif ch.islower():
                d = ord(ch) - ord("a") + 10
            elif ch.isupper():
                d = ord(ch) - ord("A") + 36
            else:
                d = 62 if ch == "@" else 63
            if d >= base:
                raise Unknown(f"{word!r}: bash refuses the digit {ch!r} (value too great for base)")
            value = value * base + d
        return value
    if word[:2].lower() == "0x":
        return int(word, 16)
    if len(word) > 1 and word[0] == "0":
        if any(c in "89" for c in word):
            raise Unknown(f"{word!r}: bash reads it as octal and refuses its digits")
        return int(word, 8)
    return int(word)


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.at = tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> str:
        word = self.peek()
        if word is None:
            raise Unknown("the expression ends early (bash: syntax error)")
        self.at += 1
        return word

    def ternary(self) -> Node:
        cond = self.binary(0)
        if self.peek() != "?":
            return cond
        self.take()
        yes = self.ternary()
        if self.take() != ":":
            raise Unknown("'?' without ':' (bash: syntax error)")
        return ("?", cond, yes, self.ternary())

    def binary(self, level: int) -> Node:
        if level == len(_BINARY):
            return self.power()
        left = self.binary(level + 1)
        while self.peek() in _BINARY[level]:
            op = self.take()
            left = (op, left, self.binary(level + 1))
        return left

    def power(self) -> Node:
        base = self.unary()
        if self.peek() == "**":
            self.take()
            return ("**", base, self.power())
        return base

    def unary(self) -> Node:
        word = self.take()
        if word in ("-", "+", "!", "~"):
            return ("u" + word, self.unary())
        if word == "(":
            inner = self.ternary()
            if self.take() != ")":
                raise Unknown("unbalanced parentheses (bash: syntax error)")
            return inner
        if word[0].isdigit():
            return _number(word)
        raise Unknown(f"{word!r} where bash expects a number (bash: syntax error)")


def _divide(a: int, b: int, op: str) -> int:
    if b == 0:
        raise Unknown("division by 0, on which bash stops the script")
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return q if op == "/" else a - b * q


_OPS: dict[str, Callable[[int, int], int]] = {
    "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b,
    "&": lambda a, b: a & b,
    "==": lambda a, b: int(a == b),
    "!=": lambda a, b: int(a != b),
    "<": lambda a, b: int(a < b),
    "<=": lambda a, b: int(a <= b),
    ">": lambda a, b: int(a > b),
    ">=": lambda a, b: int(a >= b),
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}


class _Eval:
    """A tree's value in bash's 64-bit integers; `wrapped` where a step left them. `noeval`: the
    side of `?:`, `&&` or `||` bash does not take, which it still walks (expr.c's `noeval`):
    there only a negative exponent stops it (bash 5.2 raises "exponent less than 0" whatever
    noeval says), a division by 0 or a shift is not evaluated, and its value is thrown away."""

    def __init__(self, noeval: bool = False) -> None:
        self.wrapped = False
        self.noeval = noeval

    def fit(self, value: int) -> int:
        out = _wrap(value)
        self.wrapped |= out != value and not self.noeval
        return out

    def skip(self, node: Node) -> None:
        """Walk the side bash does not take (`noeval`)."""
        _Eval(noeval=True)(node)

    def __call__(self, node: Node) -> int:
        if isinstance(node, int):
            return self.fit(node)
        op = node[0]
        if op == "?":
            cond = self(node[1])
            taken, other = (node[2], node[3]) if cond else (node[3], node[2])
            value = self(taken)
            self.skip(other)
            return value
        if op in ("&&", "||"):
            first = bool(self(node[1]))
            if first == (op == "||"):  # decided: the right side is walked, not evaluated
                self.skip(node[2])
                return int(first)
            return int(bool(self(node[2])))
        if op[0] == "u" and len(node) == 2:
            v = self(node[1])
            return self.fit({"u-": -v, "u+": v, "u!": int(not v), "u~": ~v}[op])
        a, b = self(node[1]), self(node[2])
        if op == "**":
            if b < 0:
                raise Unknown("an exponent below 0, on which bash stops the script")
            exact = a**b if abs(a) < 2 or b <= BITS else None
            out = _wrap(pow(a, b, _MOD))
            self.wrapped |= (exact is None or exact != out) and not self.noeval
            return out
        if self.noeval and op in ("/", "%", "<<", ">>"):
            return 0
        if op in ("/", "%"):
            return self.fit(_divide(a, b, op))
        if op in ("<<", ">>"):
            if not 0 <= b < BITS:
                raise Unknown(f"a shift by {b}, whose result in bash depends on the machine")
            return self.fit(a << b if op == "<<" else a >> b)
        return self.fit(_OPS[op](a, b))


def evaluate(text: str) -> int:
    """The value of an arithmetic expression of integers (no names: the caller substitutes the
    variables it knows), as bash computes it; Unknown where planner does not evaluate it."""
    if len(text) > MAX_CHARS:
        raise Unknown(f"longer than {MAX_CHARS} characters")
    if not text.strip():
        return 0  # bash: $(( )) is 0
    parser = _Parser(_tokens(text))
    try:
        tree = parser.ternary()
        if parser.peek() is not None:
            raise Unknown(f"{parser.peek()!r} where the expression should end (bash: syntax error)")
        run = _Eval()
        value = run(tree)
    except RecursionError:
        raise Unknown("nested too deeply") from None
    if run.wrapped:
        raise Unknown(f"past 64-bit integers: bash wraps it around to {value}")
    return value


def why(text: str) -> str:
    """Why planner does not evaluate the expression `text` (as written, its variables not
    substituted); '' where it does."""
    try:
        evaluate(text)
    except Unknown as e:
        return str(e)
    return ""
