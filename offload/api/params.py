"""Strict integers for the API's bodies and query strings.

Pydantic's lax mode took `"limit": true` as 1, 5.0 and "5" as 5, and `offset=1_0` or `+10` as 10: a
client's mistake answered as if it had asked for something else. A body's integer must be a JSON integer;
a query string's, plain decimal digits (`-?[0-9]+`, which int() is far more lenient than).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Strict
from pydantic_core import PydanticCustomError

_PLAIN_INTEGER = re.compile(r"-?[0-9]+")


def is_plain_integer(text: str) -> bool:
    """Whether `text` is an integer in plain decimal digits: no sign but a minus, no underscores, spaces,
    exponent, or digits of other scripts (int() takes "+1_0 ", "١٠" and "１０")."""
    return _PLAIN_INTEGER.fullmatch(text) is not None


def _plain_integer(value: Any) -> Any:
    if isinstance(value, str):
        if not is_plain_integer(value):
            raise PydanticCustomError("int_plain_decimal", "Input should be an integer in plain decimal digits, "
                                      "such as 10 or -40 (got {text})", {"text": repr(value)})
        return int(value)
    return value  # a default, already an int


BodyInt = Annotated[int, Strict()]  # JSON: an integer, not true, 5.0 or "5"
# after Query(ge=, le=) in an Annotated, so that the bounds stay in the schema as minimum and maximum
PLAIN_DIGITS = BeforeValidator(_plain_integer)
QueryInt = Annotated[int, PLAIN_DIGITS]
