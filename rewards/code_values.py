"""Plain values in a canonical JSON form: what a graded program's answers travel as.

A probe's value (what `f(2)` returned in the program's process) crosses to the judging side only as
plain data: None, bool, int, float, complex, str, bytes and lists, tuples, sets, frozensets and
dicts of them, checked by exact type (a subclass of int with its own `__eq__`, or any other
object, is "not plain": the test it belongs to fails). An exception is its class's name. Decoding
builds fresh builtin values, so whatever is compared afterwards compares as the builtins do.

`VALUES_SOURCE` is the one definition of both directions: it runs as is inside the sandboxed
programs (the program's side and the judge), and here (`encode`, `decode`).
"""

from __future__ import annotations

VALUES_SOURCE = r'''
MAX_DEPTH = 64
MAX_ITEMS = 100000


class NotPlain(Exception):
    pass


def encode(value, depth=0):
    """Plain `value` as JSON-ready data; {"u": type name} for anything else."""
    kind = type(value)
    if depth > MAX_DEPTH:
        return {"u": "nesting"}
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return {"i": str(value)}
    if kind is float:
        return {"f": repr(value)}
    if kind is complex:
        return {"c": [repr(value.real), repr(value.imag)]}
    if kind is bytes:
        return {"b": value.hex()}
    tags = {list: "l", tuple: "t", set: "s", frozenset: "fs"}
    if kind in tags:
        if len(value) > MAX_ITEMS:
            return {"u": "size"}
        items = [encode(item, depth + 1) for item in value]
        if kind in (set, frozenset):
            items.sort(key=lambda item: __import__("json").dumps(item, sort_keys=True))
        return {tags[kind]: items}
    if kind is dict:
        if len(value) > MAX_ITEMS:
            return {"u": "size"}
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, BaseException):
        return {"x": type(value).__name__}
    return {"u": kind.__name__}


def decode(data, depth=0):
    """The value `encode` gave `data` for; NotPlain for anything else (or for a raised exception's tag)."""
    if depth > MAX_DEPTH:
        raise NotPlain("nesting")
    if data is None or type(data) in (bool, str):
        return data
    if type(data) is not dict or len(data) != 1:
        raise NotPlain(repr(type(data)))
    (tag, inner), = data.items()
    if tag == "i" and type(inner) is str:
        return int(inner)
    if tag == "f" and type(inner) is str:
        return float(inner)
    if tag == "c" and type(inner) is list and len(inner) == 2:
        return complex(float(inner[0]), float(inner[1]))
    if tag == "b" and type(inner) is str:
        return bytes.fromhex(inner)
    builders = {"l": list, "t": tuple, "s": set, "fs": frozenset}
    if tag in builders and type(inner) is list:
        return builders[tag](decode(item, depth + 1) for item in inner)
    if tag == "d" and type(inner) is list:
        pairs = []
        for pair in inner:
            if type(pair) is not list or len(pair) != 2:
                raise NotPlain("pair")
            pairs.append((decode(pair[0], depth + 1), decode(pair[1], depth + 1)))
        return dict(pairs)
    raise NotPlain(str(tag))
'''

_namespace: dict = {}
exec(compile(VALUES_SOURCE, "rewards/code_values.py:VALUES_SOURCE", "exec"), _namespace)
encode = _namespace["encode"]
decode = _namespace["decode"]
NotPlain = _namespace["NotPlain"]


def decoded(data):
    """(True, value), or (False, why) for an exception's tag or data that is not plain."""
    try:
        return True, decode(data)
    except (NotPlain, ValueError, TypeError, OverflowError, RecursionError) as exc:
        return False, str(exc) or type(exc).__name__
