"""Typed reading of one parsed Hugging Face config.json for `planner.inputs.hf_import`: required and
optional sizes (with accepted aliases), flags, strings and layer lists, each failure an InputError
naming the file, the HF field, the value and the architecture."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from planner.inputs.errors import InputError, spelled_json, where

V = TypeVar("V", bool, str)


def _got(value: Any) -> str:
    """The bad value as the config.json spells it."""
    return f"(got {spelled_json(value)})"


class Reader:
    """Typed access to one parsed config; every failure names the file, field and architecture."""

    def __init__(self, cfg: dict[str, Any], path: Path | str | None, arch: str) -> None:
        self.cfg = cfg
        self.file = where(path)
        self.arch = arch
        self.notes: list[str] = []  # what ModelArch cannot express, added to `source`

    def with_fields(self, **fill: Any) -> Reader:
        """The same config with `fill` over its fields: errors name the same file, notes join
        this reader's."""
        sub = Reader({**self.cfg, **fill}, None, self.arch)
        sub.file, sub.notes = self.file, self.notes
        return sub

    def error(self, key: str, msg: str) -> InputError:
        return InputError(f"{self.file}: {key}: {msg}")

    def _first(self, keys: tuple[str, ...]) -> tuple[str, Any]:
        """The first of `keys` present with a non-null value, else (keys[0], None)."""
        for key in keys:
            if self.cfg.get(key) is not None:
                return key, self.cfg[key]
        return keys[0], None

    def _check_int(self, key: str, value: Any, minimum: int, maximum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            need = "a positive integer" if minimum > 0 else f"an integer >= {minimum}"
            raise self.error(key, f"must be {need} for {self.arch} {_got(value)}")
        if maximum is not None and value > maximum:
            raise self.error(key, f"must be at most {maximum:,} {_got(value)}")
        return value

    def req_int(self, *keys: str, minimum: int = 1, maximum: int | None = None) -> int:
        """A required size; aliases after the first are also accepted."""
        key, value = self._first(keys)
        if value is None:
            also = f" (also accepted: {', '.join(keys[1:])})" if len(keys) > 1 else ""
            null = next((k for k in keys if k in self.cfg), None)
            if null is not None:  # present as null: the key is named with its value
                raise self.error(null, f"null {_got(None)}; required for {self.arch}{also}")
            raise self.error(key, f"required field missing for {self.arch}{also}")
        return self._check_int(key, value, minimum, maximum)

    def opt_int(self, *keys: str, default: int | None = None, minimum: int = 1) -> int | None:
        """An optional size: absent or null gives `default`."""
        key, value = self._first(keys)
        return default if value is None else self._check_int(key, value, minimum)

    def nullable_int(self, key: str, minimum: int = 1) -> int | None:
        """A key that must be present but may be null (e.g. DeepSeek q_lora_rank)."""
        if key not in self.cfg:
            raise self.error(key, f"required field missing for {self.arch} (null is allowed)")
        value = self.cfg[key]
        return None if value is None else self._check_int(key, value, minimum)

    def _typed(self, key: str, default: V, what: str) -> V:
        """An optional value of default's type: absent or null gives `default`."""
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, type(default)):
            raise self.error(key, f"must be {what} {_got(value)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        return self._typed(key, default, "true or false")

    def text(self, key: str, default: str) -> str:
        return self._typed(key, default, "a string")

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        """A string that must be one of `choices` (absent or null gives `default`)."""
        value = self.text(key, default)
        if value not in choices:
            named = " or ".join(f'"{c}"' for c in choices)
            raise self.error(key, f"must be {named} for {self.arch} {_got(value)}")
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.cfg.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.error(key, f"must be a list of layer indices {_got(value)}")
        return value
