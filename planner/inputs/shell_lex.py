"""A launch script's text as shell commands (`parse`): the subset of bash that Megatron-LM's and
its users' launch scripts are written in, read without running anything.

Lexing follows bash's rules for words: single quotes, double quotes (with `\\` escapes), `\\`
outside quotes, `$(...)`, `$((...))`, `${...}` and backquotes kept whole inside a word, comments
from an unquoted `#` at a word's start, `\\` + newline joined. A word that starts `NAME=(` or
`NAME+=(` is an array assignment up to its matching `)`, over any number of lines. Operators:
newline, `;`, `;;`, `&`, `&&`, `|`, `||`, `(`, `)`; redirections (`>`, `2>&1`, `&>`, `<`, ...)
are dropped with their target. One leniency: a `|` inside a word (`M*-|M*-`, Megatron's
hybrid layer pattern pasted unquoted) is part of it, a pipe only where a word starts.

Parsing builds `Simple` commands (their leading `NAME=value` assignments apart) and the compound
commands scripts use: `if`/`elif`/`else`, `case`, `for` / `while` / `until` loops, `{ ...; }` and
`( ... )` groups, and function definitions. What it does not know (here-documents, `[[ ]]` with
newlines inside, arithmetic commands `(( ))`) it reads as plain words, never as an error: the
reader of the words (`planner.inputs.shell_run`) decides what matters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NAME_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)
_OPERATORS = ("&&", "||", ";;", ";", "&", "|", "(", ")")
_REDIRECT = re.compile(r"^(\d*|&)(>>|>&|>|<<<|<&|<)$")
DECLARES = frozenset({"export", "declare", "local", "readonly", "typeset"})
"""Builtins whose `NAME=value` words are assignments."""
KEYWORDS = frozenset(
    {"if", "then", "elif", "else", "fi", "case", "esac", "for", "while", "until", "do", "done"}
    | {"in", "function", "{", "}", "!", "select"}
)


@dataclass
class Token:
    """A word (its raw text, quotes kept) or an operator (`op`)."""

    text: str
    op: bool = False
    array: list[str] | None = None
    """An array assignment's element words (raw), the token's text being `NAME=` or `NAME+=`."""


@dataclass
class Simple:
    """A simple command: its assignments (name, append, raw value or raw array elements) and
    its raw words."""

    assigns: list[tuple[str, bool, str | list[str]]] = field(default_factory=list)
    words: list[str] = field(default_factory=list)


@dataclass
class If:
    branches: list[tuple[list[Node], list[Node]]]
    """(condition, body) of the `if` and each `elif`."""
    otherwise: list[Node]


@dataclass
class Case:
    word: str
    items: list[tuple[list[str], list[Node]]]


@dataclass
class Loop:
    kind: str
    """for, select, while or until."""
    var: str
    items: list[str] | None
    """A for loop's raw words (None: "$@")."""
    cond: list[Node]
    body: list[Node]


@dataclass
class Group:
    body: list[Node]


@dataclass
class Function:
    name: str
    body: list[Node]


@dataclass
class Chain:
    """Commands joined by `&&` / `||` (`ops[i]` joins `parts[i]` and `parts[i + 1]`)."""

    parts: list[Node]
    ops: list[str]


Node = Simple | If | Case | Loop | Group | Function | Chain


def lex(text: str) -> list[Token]:
    """The script's tokens (module docstring)."""
    out: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r":
            i += 1
        elif c == "\\" and text.startswith("\n", i + 1):
            i += 2
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif c == "\n":
            out.append(Token("\n", op=True))
            i += 1
        elif (op := next((o for o in _OPERATORS if text.startswith(o, i)), None)) is not None:
            out.append(Token(op, op=True))
            i += len(op)
        else:
            word, i = _word(text, i)
            m = _NAME_ASSIGN.match(word)
            if m and m.group(3) == "" and text.startswith("(", i):
                elements, i = _array(text, i + 1)
                out.append(Token(word, array=elements))
            elif word in ("<<", "<<-"):  # a here-document: its body is no command
                i = _heredoc_end(text, i)
            else:
                out.append(Token(word))
    return out


def _heredoc_end(text: str, i: int) -> int:
    """The index after a here-document whose `<<` ends at i: its delimiter word, the rest of
    that line, and the lines up to the one holding only the delimiter."""
    while i < len(text) and text[i] in " \t":
        i += 1
    word, i = _word(text, i) if i < len(text) and text[i] != "\n" else ("", i)
    delimiter = word.strip("'\"")
    j = text.find("\n", i)
    if not delimiter or j < 0:
        return len(text) if j < 0 else j
    for m in re.finditer(r"^[ \t]*(.*?)[ \t]*$", text[j + 1 :], re.M):
        if m.group(1) == delimiter:
            return j + 1 + m.end()
    return len(text)


def _word(text: str, i: int) -> tuple[str, int]:
    """One word from i: up to unquoted whitespace or an operator; a redirection operator
    (`>`, `2>&`, `<<`, ...) is a word of its own."""
    start, n = i, len(text)
    if text[i] in "<>":
        end = _redirect_end(text, i)
        return text[start:end], end
    while i < n:
        c = text[i]
        if c in "<>" and text[start:i].isdigit():  # 2>&1: the redirection's own word
            end = _redirect_end(text, i)
            return text[start:end], end
        if c in " \t\r\n;&()<>":  # a `|` inside a word stays (module docstring)
            break
        if c == "\\":
            i += 2
        elif c == "'":
            j = text.find("'", i + 1)
            i = n if j < 0 else j + 1
        elif c == '"':
            i = _double_quoted_end(text, i + 1)
        elif c == "`":
            j = text.find("`", i + 1)
            i = n if j < 0 else j + 1
        elif c == "$" and text.startswith("(", i + 1):
            i = _matching(text, i + 1, "(", ")")
        elif c == "$" and text.startswith("{", i + 1):
            i = _matching(text, i + 1, "{", "}")
        else:
            i += 1
    return text[start:i], i


def _redirect_end(text: str, i: int) -> int:
    """The end of a redirection operator at i (`>`, `>>`, `>&`, `<`, ...)."""
    while i < len(text) and text[i] in "<>&":
        i += 1
    return i


def _double_quoted_end(text: str, i: int) -> int:
    """The index after the closing `"` of a string whose body starts at i."""
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "$" and text.startswith("(", i + 1):
            i = _matching(text, i + 1, "(", ")")
        elif c == "`":
            j = text.find("`", i + 1)
            i = n if j < 0 else j + 1
        else:
            i += 1
    return n


def _matching(text: str, i: int, open_: str, close: str) -> int:
    """The index after the bracket that closes the one at i (quotes inside skipped)."""
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'" and open_ == "(":
            j = text.find("'", i + 1)
            i = n if j < 0 else j + 1
            continue
        if c == '"':
            i = _double_quoted_end(text, i + 1)
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def _array(text: str, i: int) -> tuple[list[str], int]:
    """An array literal's raw element words from i (after its `(`) to its `)`: comments and
    newlines between them skipped."""
    elements: list[str] = []
    n = len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n":
            i += 1
        elif c == "\\" and text.startswith("\n", i + 1):
            i += 2
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif c == ")":
            return elements, i + 1
        else:
            word, j = _word(text, i)
            if j == i:  # an operator character inside the list: keep it as a word
                word, j = text[i], i + 1
            elements.append(word)
            i = j
    return elements, n


def parse(text: str) -> list[Node]:
    """The script's commands, in order."""
    return _Parser(lex(text)).commands(frozenset())


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.toks = tokens
        self.i = 0

    def peek(self) -> Token | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def at_word(self, *words: str) -> bool:
        t = self.peek()
        return t is not None and not t.op and t.array is None and t.text in words

    def skip_separators(self) -> None:
        while (t := self.peek()) is not None and t.op and t.text in ("\n", ";", "&"):
            self.i += 1

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
                continue
            break
        if not parts:
            self.i += 1 if self.peek() is not None and not self.at_word(*stop) else 0
            return None
        return parts[0] if len(parts) == 1 else Chain(parts, ops[: len(parts) - 1])

    def command(self, stop: frozenset[str]) -> Node | None:
        t = self.peek()
        if t is None or self.at_word(*stop):
            return None
        if t.op:
            if t.text == "(":
                self.i += 1
                body = self.commands(frozenset())
                self._expect_op(")")
                return Group(body)
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
                name = self.toks[self.i].text if self.peek() else ""
                self.i += 1
                if self.peek() is not None and self.peek().text == "(":  # type: ignore[union-attr]
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
                if self.peek() is not None and not self.peek().op:  # type: ignore[union-attr]
                    self.i += 1  # its target
                continue
            m = _NAME_ASSIGN.match(t.text)
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
        word = self.peek().text if self.peek() is not None else ""  # type: ignore[union-attr]
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
            var = self.peek().text if self.peek() is not None else ""  # type: ignore[union-attr]
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
