"""A launch script's text as shell tokens (`lex`), for `planner.inputs.shell_parse`.

Words follow bash's rules: single quotes, double quotes (with `\\` escapes), `\\` outside quotes,
`$(...)`, `$((...))`, `${...}` and backquotes kept whole inside a word, comments from an unquoted
`#` at a word's start, `\\` + newline joined. A word that starts `NAME=(` or `NAME+=(` is an
array assignment up to its matching `)`, over any number of lines. Operators: newline, `;`,
`;;`, `&`, `&&`, `|`, `||`, `(`, `)`; a redirection operator (`>`, `2>&`, `<`, ...) is a word
of its own, which the parser drops with its target; a here-document's body is skipped. One
leniency: a `|` inside a word (`M*-|M*-`, Megatron's hybrid layer pattern pasted unquoted) is
part of it, a pipe only where a word starts. Each token has its line. A quote (`'`, `"`, a
backquote, `$(`, `${`, an array's `(`) the text never closes swallows the rest of the file, as in
bash: the tokens end with one that holds that rest and names what bash looks for
(`Token.unclosed`), its line the quote's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)
"""`NAME=value` / `NAME+=value`: (name, "+" or "", value)."""
_OPERATORS = ("&&", "||", ";;", ";", "&", "|", "(", ")")


@dataclass
class Token:
    """A word (its raw text, quotes kept) or an operator (`op`)."""

    text: str
    op: bool = False
    array: list[str] | None = None
    """An array assignment's element words (raw), the token's text being `NAME=` or `NAME+=`."""
    line: int = 0
    """The line it starts on (1-based)."""
    unclosed: str | None = None
    """The last token where a quote is never closed: the character bash looks for to the end of
    the file (`'`, `"`, a backquote, `)`, `}`); its text the rest of the file from its word."""


class Unclosed(Exception):
    """A quote from `at` that the text never closes: bash looks for `closes` to its end."""

    def __init__(self, at: int, closes: str) -> None:
        super().__init__(at, closes)
        self.at, self.closes = at, closes


def lex(text: str) -> list[Token]:
    """The script's tokens (module docstring)."""
    out: list[Token] = []
    i, n = 0, len(text)
    line, counted = 1, 0  # the line of index `counted`

    def line_at(k: int) -> int:
        nonlocal line, counted
        line, counted = line + text.count("\n", counted, k), k
        return line

    while i < n:
        if (j := _skip(text, i, newlines=False)) != i:
            i = j
            continue
        c = text[i]
        if c == "\n":
            out.append(Token("\n", op=True, line=line_at(i)))
            i += 1
        elif (op := next((o for o in _OPERATORS if text.startswith(o, i)), None)) is not None:
            out.append(Token(op, op=True, line=line_at(i)))
            i += len(op)
        else:
            start = i
            try:
                word, i = _word(text, i)
                m = NAME_ASSIGN.match(word)
                if m and m.group(3) == "" and text.startswith("(", i):
                    elements, i = _array(text, i + 1)
                    out.append(Token(word, array=elements, line=line_at(start)))
                elif word in ("<<", "<<-"):  # a here-document: its body is no command
                    i = _heredoc_end(text, i)
                else:
                    out.append(Token(word, line=line_at(start)))
            except Unclosed as e:  # the rest of the file is inside it
                opened = text.count("\n", 0, e.at) + 1
                out.append(Token(text[start:], op=True, line=opened, unclosed=e.closes))
                break
    return out


def _skip(text: str, i: int, newlines: bool) -> int:
    """The index after the blanks, `\\` + newline joins and comments from i (and newlines,
    where `newlines`)."""
    n = len(text)
    blanks = " \t\r\n" if newlines else " \t\r"
    while i < n:
        if text[i] in blanks:
            i += 1
        elif text.startswith("\\\n", i):
            i += 2
        elif text[i] == "#":
            while i < n and text[i] != "\n":
                i += 1
        else:
            break
    return i


def _heredoc_end(text: str, i: int) -> int:
    """The index after a here-document whose `<<` ends at i: its delimiter word, the rest of
    that line, and the lines up to the one holding only the delimiter."""
    i += 1 if text.startswith("-", i) else 0  # <<-EOF: the `-` is the operator's
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
            i = _closing(text, i, "'")
        elif c == "$" and text.startswith("'", i + 1):  # $'...': `\'` inside is no end
            i = _ansi_c_end(text, i + 1)
        elif c == '"':
            i = _double_quoted_end(text, i + 1)
        elif c == "`":
            i = _closing(text, i, "`")
        elif c == "$" and text.startswith("(", i + 1):
            i = _matching(text, i + 1, "(", ")")
        elif c == "$" and text.startswith("{", i + 1):
            i = _matching(text, i + 1, "{", "}")
        else:
            i += 1
    return text[start:i], i


def _closing(text: str, i: int, quote: str) -> int:
    """The index after the `quote` that closes the one at i (Unclosed where none does)."""
    j = text.find(quote, i + 1)
    if j < 0:
        raise Unclosed(i, quote)
    return j + 1


def _ansi_c_end(text: str, i: int) -> int:
    """The index after a `$'...'` string whose `'` is at i (backslash escapes inside)."""
    k, n = i + 1, len(text)
    while k < n and text[k] != "'":
        k += 2 if text[k] == "\\" else 1
    if k >= n:
        raise Unclosed(i, "'")
    return k + 1


def _redirect_end(text: str, i: int) -> int:
    """The end of a redirection operator at i (`>`, `>>`, `>&`, `<`, ...)."""
    while i < len(text) and text[i] in "<>&":
        i += 1
    return i


def _double_quoted_end(text: str, i: int) -> int:
    """The index after the closing `"` of a string whose body starts at i (Unclosed where the
    text never closes it)."""
    n, start = len(text), i - 1
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "$" and text.startswith("(", i + 1):
            i = _matching(text, i + 1, "(", ")")
        elif c == "$" and text.startswith("{", i + 1):  # bash matches quotes inside ${...}
            i = _matching(text, i + 1, "{", "}")
        elif c == "`":
            i = _closing(text, i, "`")
        else:
            i += 1
    raise Unclosed(start, '"')


def _matching(text: str, i: int, open_: str, close: str) -> int:
    """The index after the bracket that closes the one at i (quotes inside skipped; Unclosed
    where the text never closes it)."""
    depth, n, start = 0, len(text), i
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            i = _closing(text, i, "'")
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
    raise Unclosed(start, close)


def _array(text: str, i: int) -> tuple[list[str], int]:
    """An array literal's raw element words from i (after its `(`) to its `)`: comments and
    newlines between them skipped (Unclosed where the text never closes it)."""
    elements: list[str] = []
    n, start = len(text), i - 1
    while (i := _skip(text, i, newlines=True)) < n:
        if text[i] == ")":
            return elements, i + 1
        word, j = _word(text, i)
        if j == i:  # an operator character inside the list: keep it as a word
            word, j = text[i], i + 1
        elements.append(word)
        i = j
    raise Unclosed(start, ")")
