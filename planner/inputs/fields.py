"""Number and flag types of the input models (plan file, catalog, model zoo, HF config import).

TOML and JSON carry their own types, so the models coerce nothing: `true` is not the integer 1,
8.0 is not the layer count 8, 1 and "yes" are not booleans (pydantic's lax mode would take all of
these), and neither inf nor nan is a size, bandwidth or capacity (a `memory_gib = inf` would make
every layout fit). Integers are accepted where a float is expected.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, StrictBool, StrictFloat, StrictInt

PositiveInt = Annotated[StrictInt, Field(gt=0)]
NonNegativeInt = Annotated[StrictInt, Field(ge=0)]
PositiveFloat = Annotated[StrictFloat, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[StrictFloat, Field(ge=0, allow_inf_nan=False)]
Flag = StrictBool


def _integer(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("Input should be an integer")
    return value


Integer = BeforeValidator(_integer)
"""For a Literal of integers (`Annotated[Literal[0, 1], Integer]`), which pydantic cannot make
strict and which would otherwise take `true` as 1 and 2.0 as 2."""
