"""TOML values against a config field's type hint: checking, coercing, naming the types
in errors (`train.config` reads every key through these)."""

from __future__ import annotations

import types
import typing
from typing import Any

# ---- types --------------------------------------------------------------------------------


def describe_type(tp: Any) -> str:
    """A type hint in words: "an integer or a list of integers"."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(a) for a in typing.get_args(tp))
    if origin is list:
        return f"a list of {_plural(typing.get_args(tp)[0])}"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}[tp]


def _plural(tp: Any) -> str:
    """The items of a list in words: "integers", "lists of numbers"."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_plural(a) for a in typing.get_args(tp))
    if origin is list:
        return f"lists of {_plural(typing.get_args(tp)[0])}"
    return {int: "integers", float: "numbers", str: "strings", bool: "true or false values"}[tp]


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
