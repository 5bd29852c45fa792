"""Reading the files a user names: plans, model TOMLs, HF config.json files, Megatron launch
scripts (or standard input), and validating what they hold.

Every failure is an InputError naming the file (exit 2): a missing path, a directory, bytes that
are not UTF-8, malformed TOML, a file too large to be any of these, or a pydantic validation error
(one `file: field: message (got value)` line per problem, `errors.from_validation`).
"""

from __future__ import annotations

import gzip
import tomllib
import zlib
from pathlib import Path
from typing import IO, Any, TypeVar

from pydantic import BaseModel, ValidationError

from planner.inputs.errors import InputError, from_validation
from planner.inputs.units import MIB

T = TypeVar("T", bound=BaseModel)

MAX_INPUT_CHARS = 16 * MIB
"""The most a user's file may hold. What planner reads (a plan, a model TOML, an HF config.json, a
Megatron launch script) is a few kB; a file of 16 MiB is something else (or /dev/zero), and reading
it whole would only fill memory."""


def read_text(stream: IO[str], where: str) -> str:
    """Read a user's text stream, at most MAX_INPUT_CHARS; more, or bytes that are not UTF-8, is an
    InputError naming `where`."""
    try:
        text = stream.read(MAX_INPUT_CHARS + 1)
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{where}: cannot read: {e}") from None
    if len(text) > MAX_INPUT_CHARS:
        raise InputError(
            f"{where}: more than {MAX_INPUT_CHARS:,} characters: not a plan, config or launch file"
        )
    return text


def is_file(path: Path) -> bool:
    """Whether the path is a file (False for a name the system refuses: read_file says why)."""
    try:
        return path.is_file()
    except OSError:
        return False


def exists(path: Path) -> bool:
    """Whether anything is at the path (False for a name the system refuses)."""
    try:
        return path.exists()
    except OSError:
        return False


def is_dir(path: Path) -> bool:
    """Whether the path is a directory (False for a name the system refuses)."""
    try:
        return path.is_dir()
    except OSError:
        return False


def read_file(path: Path) -> str:
    """Read a text file the user named; a missing path, a directory or a name the system refuses
    (too long, say: a command line passed where its file was expected) is an InputError."""
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    if not exists:
        raise InputError(f"{path}: no such file")
    if is_dir:
        raise InputError(f"{path}: is a directory, expected a file")
    try:
        with path.open(encoding="utf-8") as f:
            return read_text(f, str(path))
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e}") from None


MAX_LOG_CHARS = 512 * MIB
"""The most a training log may hold: a run that logs every iteration, or a log full of NCCL's
INFO lines, passes MAX_INPUT_CHARS by far."""
GZIP_MAGIC = b"\x1f\x8b"


def read_log(path: Path) -> str:
    """A training log's text: gzip'd or not (its magic bytes), at most MAX_LOG_CHARS; bytes
    that are not UTF-8 (another program's lines) read as U+FFFD, which no field the reader
    parses holds. Line ends are kept as written (newline=""): a progress bar's bare carriage
    returns stay inside its line, so that the reader's line numbers are `grep -n`'s, and a
    Windows line end leaves a carriage return at the end of its line, which the reader strips
    with the spaces around each value. A gzip'd log cut short or corrupt is an InputError
    naming the file."""
    if not is_file(path):
        read_file(path)  # its message: no such file, a directory, a name the system refuses
    gzipped = False
    try:
        with path.open("rb") as raw:
            gzipped = raw.read(2) == GZIP_MAGIC
        if gzipped:
            with gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="") as z:
                text = z.read(MAX_LOG_CHARS + 1)
        else:
            with path.open(encoding="utf-8", errors="replace", newline="") as f:
                text = f.read(MAX_LOG_CHARS + 1)
    except (OSError, EOFError, zlib.error) as e:  # zlib.error: corrupt deflate data
        what = "gzip'd log" if gzipped else "log"
        raise InputError(f"{path}: cannot read the {what}: {e}") from None
    if len(text) > MAX_LOG_CHARS:
        raise InputError(
            f"{path}: a log of more than {MAX_LOG_CHARS:,} characters: keep its arguments block "
            "and the iteration and memory lines (grep)"
        )
    return text


def load_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; malformed TOML is an InputError quoting tomllib's line and column."""
    return parse_toml(read_file(path), str(path))


def parse_toml(text: str, where: str) -> dict[str, Any]:
    """Parse TOML text read from `where`. Malformed TOML, arrays or tables nested deeper than
    Python's recursion limit (tomllib recurses once per level) and an integer of more digits than
    Python converts (4,300) are InputErrors naming `where`."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{where}: malformed TOML: {e}") from None
    except RecursionError:
        raise InputError(f"{where}: malformed TOML: nested too deep to read") from None
    except ValueError as e:  # int() of a literal beyond sys.get_int_max_str_digits()
        raise InputError(f"{where}: malformed TOML: {e}") from None


def validate(cls: type[T], data: dict[str, Any], path: Path | str | None, prefix: str = "") -> T:
    """Build a pydantic model, turning a ValidationError into one InputError."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise from_validation(e, path, prefix, cls) from None
