"""TOML values against a config field's type hint: checking, coercing, naming the types
in errors (`train.config` reads every key through these)."""

from __future__ import annotations

import types
import typing
from typing import Any

# ---- types --------------------------------------------------------------------------------


#: A scalar type in words, alone and as the items of a list.
_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
_PLURALS = {int: "integers", float: "numbers", str: "strings", bool: "true or false values"}


def describe_type(tp: Any, plural: bool = False) -> str:
    """A type hint in words: "an integer or a list of integers" ("integers or lists of
    integers" as a list's items, `plural`)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(a, plural) for a in typing.get_args(tp))
    if origin is list:
        items = describe_type(typing.get_args(tp)[0], plural=True)
        return f"lists of {items}" if plural else f"a list of {items}"
    return (_PLURALS if plural else _NAMES)[tp]


def coerce(value: Any, tp: Any) -> Any:
    """Return `value` as type `tp` (ints accepted for floats) or raise TypeError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return coerce(value, option)
            except TypeError:
                pass
        raise TypeError
    if origin is list:
        if not isinstance(value, list):
            raise TypeError
        (item,) = typing.get_args(tp)
        return [coerce(v, item) for v in value]
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp in (str, bool) and isinstance(value, tp):
        return value
    raise TypeError


def toml_type_name(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}
    return names.get(type(value), "table" if isinstance(value, dict) else type(value).__name__)
