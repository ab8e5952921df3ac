"""Strict integers for the API's bodies and query strings, and what the schema says the guard reads.

Pydantic's lax mode took `"limit": true` as 1, 5.0 and "5" as 5, and `offset=1_0` or `+10` as 10: a
client's mistake answered as if it had asked for something else. A body's integer must be a JSON integer;
a query string's, plain decimal digits (`-?[0-9]+`, which int() is far more lenient than).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Optional

from fastapi import Depends, Header, Query
from fastapi.security import HTTPBearer
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
        if len(value.lstrip("-")) > 19:  # beyond any 64-bit integer; int() of 4,300 digits and more raised
            raise PydanticCustomError("int_too_large", "Input should be an integer of at most 19 digits "
                                      "(got {digits} digits)", {"digits": f"{len(value.lstrip('-')):,}"})
        return int(value)
    return value  # a default, already an int


BodyInt = Annotated[int, Strict()]  # JSON: an integer, not true, 5.0 or "5"
# after Query(ge=, le=) in an Annotated, so that the bounds stay in the schema as minimum and maximum
PLAIN_DIGITS = BeforeValidator(_plain_integer)
QueryInt = Annotated[int, PLAIN_DIGITS]

_bearer = HTTPBearer(auto_error=False, scheme_name="bearer",
                     description="`Authorization: Bearer <token>` (or the cookie /login sets). Required when the "
                     "server has tokens, as it always has off loopback; a loopback server started without one "
                     "asks for none.")


def documented_guard(
    _token: Any = Depends(_bearer),
    _namespace: Optional[str] = Header(
        None, alias="X-Offload-Namespace",
        description="The namespace to act in (the server's own otherwise); a token scoped to a namespace may "
                    "name only that one."),
    _namespace_param: Optional[str] = Query(
        None, alias="namespace", description="The same as the X-Offload-Namespace header, which wins."),
) -> None:
    """Declares, for the OpenAPI schema, what the guard middleware (app.py) reads: it does the checking,
    before any route runs, so nothing is checked here."""
