"""Number and flag types of the input models (plan file, catalog, model zoo, HF config import).

TOML and JSON carry their own types, so the models coerce nothing: `true` is not the integer 1,
8.0 is not the layer count 8, 1 and "yes" are not booleans (pydantic's lax mode would take all of
these), and neither inf nor nan is a size, bandwidth or capacity (a `memory_gib = inf` would make
every layout fit). Integers are accepted where a float is expected.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
)

PositiveInt = Annotated[StrictInt, Field(gt=0)]
NonNegativeInt = Annotated[StrictInt, Field(ge=0)]
PositiveFloat = Annotated[StrictFloat, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[StrictFloat, Field(ge=0, allow_inf_nan=False)]
FiniteFloat = Annotated[StrictFloat, Field(allow_inf_nan=False)]
Flag = StrictBool


def _integer(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("Input should be an integer")
    return value


Integer = BeforeValidator(_integer)
"""For a Literal of integers (`Annotated[Literal[0, 1], Integer]`), which pydantic cannot make
strict and which would otherwise take `true` as 1 and 2.0 as 2."""


MAX_NAME_CHARS = 1024
"""The longest name (a model, a GPU, a link tier): a path-like Hugging Face name fits; a 30,000-
character one took rich 46 s to print."""

MAX_TEXT_CHARS = 1 << 16
"""The longest free text (a `source` note): the catalog's run to a few hundred characters."""


def _controls(value: str, allowed: str) -> str:
    """`value`, unless it holds a control character other than those `allowed` (printed raw, an
    escape sequence would rewrite the user's terminal)."""
    bad = next((c for c in value if unicodedata.category(c) == "Cc" and c not in allowed), None)
    if bad is not None:
        raise ValueError(f"no control characters (holds U+{ord(bad):04X})")
    return value


_ONE_LINE = AfterValidator(lambda v: _controls(v, ""))

Name = Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME_CHARS), _ONE_LINE]
"""A name: one line of printable text."""

Label = Annotated[StrictStr, Field(max_length=MAX_NAME_CHARS), _ONE_LINE]
"""A display name: as `Name`, and may be empty."""

Text = Annotated[
    StrictStr, Field(max_length=MAX_TEXT_CHARS), AfterValidator(lambda v: _controls(v, "\n\t"))
]
"""Free text over lines (a `source` note): tabs and line breaks, no other control character."""
