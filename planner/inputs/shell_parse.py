"""A launch script's tokens (`planner.inputs.shell_lex`) as shell commands (`parse_units`): the
subset of bash that Megatron-LM's and its users' launch scripts are written in, read without
running anything.

`Simple` commands (their leading `NAME=value` assignments apart, and those a declaration builtin
makes) and the compound commands scripts use: `if` / `elif` / `else`, `case`, `for` / `while` /
`until` loops, `{ ...; }` and `( ... )` groups, function definitions, and `&&` / `||` / `|`
chains. What it does not know (arithmetic commands `(( ))`, C-style `for`) it reads as plain
words, never as an error: the reader of the words (`planner.inputs.shell_run`) decides what
matters. Each node has the line it starts on.

A quote the file never closes (`shell_lex.Token.unclosed`) is bash's syntax error: bash parses
and runs a script one complete command at a time (up to an unquoted newline), so the commands
before the one it opens in run, and neither that one (`a; b 'c` runs no `a`) nor any after it
does. `parse_units` ends the commands there with an `Unparsed` node.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from planner.inputs.shell_lex import NAME_ASSIGN, Token, lex

_REDIRECT = re.compile(r"^(\d*|&)(>>|>&|>|<<<|<&|<)$")
DECLARES = frozenset({"export", "declare", "local", "readonly", "typeset"})
"""Builtins whose `NAME=value` words are assignments."""


@dataclass
class Simple:
    """A simple command: its assignments (name, append, raw value or raw array elements) and
    its raw words."""

    assigns: list[tuple[str, bool, str | list[str]]] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    line: int = 0


@dataclass
class If:
    branches: list[tuple[list[Node], list[Node]]]
    """(condition, body) of the `if` and each `elif`."""
    otherwise: list[Node]
    line: int = 0


@dataclass
class Case:
    word: str
    items: list[tuple[list[str], list[Node]]]
    line: int = 0


@dataclass
class Loop:
    kind: str
    """for, select, while or until."""
    var: str
    items: list[str] | None
    """A for loop's raw words (None: "$@")."""
    cond: list[Node]
    body: list[Node]
    line: int = 0


@dataclass
class Group:
    body: list[Node]
    line: int = 0
    subshell: bool = False
    """`( ... )`, run in a subshell (`{ ...; }`: in the shell itself)."""


@dataclass
class Function:
    name: str
    body: list[Node]
    line: int = 0


@dataclass
class Chain:
    """Commands joined by `&&` / `||` (`ops[i]` joins `parts[i]` and `parts[i + 1]`)."""

    parts: list[Node]
    ops: list[str]
    line: int = 0
    piped: frozenset[int] = frozenset()
    """The indices of the parts in a pipeline (`a | b`): each runs in a subshell of its own."""


@dataclass
class Unparsed:
    """Where bash's syntax error stops the script: a quote opened on `line` and never closed,
    bash looking for `closes` to the end of the file (module docstring)."""

    line: int
    closes: str


Node = Simple | If | Case | Loop | Group | Function | Chain | Unparsed


def walk(nodes: list[Node]) -> Iterator[Node]:
    """Every node of `nodes` and, at any depth, of their bodies, conditions and branches (in no
    set order): what a script holds on any path, functions' bodies included."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, Chain):
            stack += node.parts
        elif isinstance(node, If):
            stack += [n for cond, body in node.branches for n in (*cond, *body)]
            stack += node.otherwise
        elif isinstance(node, Case):
            stack += [n for _, body in node.items for n in body]
        elif isinstance(node, Loop):
            stack += [*node.cond, *node.body]
        elif isinstance(node, Group | Function):
            stack += node.body


def parse_units(text: str) -> list[list[Node]]:
    """The script's commands, in order (ending with an `Unparsed` node at a syntax error), in
    its complete commands: those bash reads and runs as
    one, up to an unquoted newline between commands (`a; b` one, `if ...\nfi; c` one). An
    error that discards the rest of a command (bash's FUNCNEST: `planner.inputs.shell_exit`)
    discards the rest of its unit."""
    parser = _Parser(lex(text))
    nodes = parser.script()
    starts = sorted({0, *(k for k in parser.units if k < len(nodes))})
    return [nodes[a:b] for a, b in zip(starts, [*starts[1:], len(nodes)], strict=True) if a < b]


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.toks = tokens
        self.i = 0
        self.units: list[int] = []
        """Where each complete command starts among the top-level commands (`parse_units`)."""

    def peek(self) -> Token | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def word_text(self) -> str:
        """The next token's text ("" at the end)."""
        t = self.peek()
        return "" if t is None else t.text

    def at_word(self, *words: str) -> bool:
        t = self.peek()
        return t is not None and not t.op and t.array is None and t.text in words

    def skip_separators(self) -> bool:
        """Past `;`, `&` and newlines; whether a newline was among them."""
        newline = False
        while (t := self.peek()) is not None and t.op and t.text in ("\n", ";", "&"):
            newline |= t.text == "\n"
            self.i += 1
        return newline

    def script(self) -> list[Node]:
        """The top-level commands; at an unclosed quote, those of the complete command it is in
        (from the last newline between commands) dropped and an `Unparsed` node in their place
        (module docstring)."""
        out: list[Node] = []
        unit = 0  # where the complete command being read starts in `out`
        last = self.toks[-1] if self.toks else None
        unclosed = last if last is not None and last.unclosed is not None else None
        while True:
            if self.skip_separators():
                unit = len(out)
                self.units.append(unit)
            t = self.peek()
            if unclosed is not None and (t is None or t is unclosed):
                del out[unit:]
                return [*out, Unparsed(unclosed.line, unclosed.unclosed or "")]
            if t is None or (t.op and t.text in (")", ";;")):
                return out
            node = self.chain(frozenset())
            if node is not None:
                out.append(node)

    def commands(self, stop: frozenset[str]) -> list[Node]:
        """Commands up to a word of `stop` in command position (or a `)` / `;;`)."""
        out: list[Node] = []
        while True:
            self.skip_separators()
            t = self.peek()
            if t is None or (t.op and t.text in (")", ";;")) or self.at_word(*stop):
                return out
            node = self.chain(stop)
            if node is not None:
                out.append(node)

    def chain(self, stop: frozenset[str]) -> Node | None:
        parts: list[Node] = []
        ops: list[str] = []
        piped: set[int] = set()
        while True:
            node = self.command(stop)
            if node is not None:
                parts.append(node)
            t = self.peek()
            if t is not None and t.op and t.text in ("&&", "||", "|"):
                self.i += 1
                while (u := self.peek()) is not None and u.op and u.text == "\n":
                    self.i += 1
                if node is not None:
                    ops.append("&&" if t.text == "|" else t.text)
                    piped |= {len(parts) - 1, len(parts)} if t.text == "|" else set()
                continue
            break
        if not parts:
            self.i += 1 if self.peek() is not None and not self.at_word(*stop) else 0
            return None
        if len(parts) == 1:
            return parts[0]
        n = len(parts)
        return Chain(parts, ops[: n - 1], parts[0].line, frozenset(k for k in piped if k < n))

    def command(self, stop: frozenset[str]) -> Node | None:
        """The command at the next token, its `line` that token's."""
        t = self.peek()
        node = self._command(stop)
        if node is not None and t is not None and not isinstance(node, Unparsed):
            node.line = t.line
        return node

    def _command(self, stop: frozenset[str]) -> Node | None:
        t = self.peek()
        if t is None or self.at_word(*stop):
            return None
        if t.op:
            if t.text == "(":
                self.i += 1
                body = self.commands(frozenset())
                self._expect_op(")")
                return Group(body, subshell=True)
            return None
        if t.array is None:
            if t.text == "if":
                return self._if()
            if t.text == "case":
                return self._case()
            if t.text in ("for", "select", "while", "until"):
                return self._loop(t.text)
            if t.text == "{":
                self.i += 1
                body = self.commands(frozenset({"}"}))
                self._expect_word("}")
                return Group(body)
            if t.text == "function":
                self.i += 1
                name = self.word_text()
                self.i += 1
                if (paren := self.peek()) is not None and paren.text == "(":
                    self.i += 2
                return self._function(name)
            if t.text == "!":
                self.i += 1
                return self.command(stop)
            nxt = self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None
            after = self.toks[self.i + 2] if self.i + 2 < len(self.toks) else None
            if nxt is not None and nxt.text == "(" and after is not None and after.text == ")":
                name = t.text
                self.i += 3
                return self._function(name)
        return self._simple()

    def _function(self, name: str) -> Function:
        self.skip_separators()
        body = self.command(frozenset())
        return Function(name, [body] if body is not None else [])

    def _simple(self) -> Simple:
        cmd = Simple()
        while (t := self.peek()) is not None and (not t.op or (t.text == "(" and cmd.words)):
            if t.op:  # `(` inside a command, a syntax error to bash: one word to the `)`
                cmd.words.append(self._glued())
                continue
            self.i += 1
            if _REDIRECT.match(t.text) or (t.text[:1] in "<>" and t.text.strip("<>&") == ""):
                if (target := self.peek()) is not None and not target.op:
                    self.i += 1  # its target
                continue
            m = NAME_ASSIGN.match(t.text)
            # the assignments before a command, and those a declaration builtin makes
            if m is not None and (not cmd.words or cmd.words[0] in DECLARES):
                value: str | list[str] = t.array if t.array is not None else m.group(3)
                cmd.assigns.append((m.group(1), m.group(2) == "+", value))
            else:
                cmd.words.append(t.text)
        return cmd

    def _glued(self) -> str:
        """The tokens from a `(` to its `)` (or the line's end) as one word."""
        parts: list[str] = []
        while (t := self.peek()) is not None and t.text != "\n":
            parts.append(t.text)
            self.i += 1
            if t.op and t.text == ")":
                break
        return "".join(parts)

    def _expect_op(self, text: str) -> None:
        t = self.peek()
        if t is not None and t.op and t.text == text:
            self.i += 1

    def _expect_word(self, text: str) -> None:
        if self.at_word(text):
            self.i += 1

    def _if(self) -> If:
        branches: list[tuple[list[Node], list[Node]]] = []
        otherwise: list[Node] = []
        self.i += 1  # if
        while True:
            cond = self.commands(frozenset({"then"}))
            self._expect_word("then")
            body = self.commands(frozenset({"elif", "else", "fi"}))
            branches.append((cond, body))
            if self.at_word("elif"):
                self.i += 1
                continue
            if self.at_word("else"):
                self.i += 1
                otherwise = self.commands(frozenset({"fi"}))
            self._expect_word("fi")
            return If(branches, otherwise)

    def _case(self) -> Case:
        self.i += 1  # case
        word = self.word_text()
        self.i += 1
        self.skip_separators()
        self._expect_word("in")
        items: list[tuple[list[str], list[Node]]] = []
        while True:
            self.skip_separators()
            if self.peek() is None or self.at_word("esac"):
                break
            self._expect_op("(")
            patterns: list[str] = []
            while (t := self.peek()) is not None and not (t.op and t.text == ")"):
                if not t.op:
                    patterns.append(t.text)
                self.i += 1
            self._expect_op(")")
            body = self.commands(frozenset({"esac"}))
            items.append((patterns, body))
            self._expect_op(";;")
        self._expect_word("esac")
        return Case(word, items)

    def _loop(self, kind: str) -> Loop:
        self.i += 1
        var, items, cond = "", None, []
        if kind in ("for", "select"):
            var = self.word_text()
            self.i += 1
            self.skip_separators()
            if self.at_word("in"):
                self.i += 1
                items = []
                while (t := self.peek()) is not None and not t.op:
                    items.append(t.text)
                    self.i += 1
        else:
            cond = self.commands(frozenset({"do"}))
        self.skip_separators()
        self._expect_word("do")
        body = self.commands(frozenset({"done"}))
        self._expect_word("done")
        return Loop(kind, var, items, cond, body)
