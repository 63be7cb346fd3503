"""Scanning MLIR text at the top level of its brackets.

Several places read pieces of printed MLIR that the Python bindings do not
hand out as objects (properties of unregistered ops, attributes the bindings
cannot cast, shardy sharding strings, quantized types, the conformance files'
custom check syntax). They all need the same scan: brackets `<([{` nest,
string literals (with backslash escapes) hide brackets, and the `>` of an
arrow `->` closes nothing. This module is that scan, once. No MLIR needed.
"""

from __future__ import annotations

from collections.abc import Iterator

_OPEN = "<([{"
_CLOSE = ">)]}"


def _scan(text: str, start: int = 0) -> Iterator[tuple[int, str, int]]:
    """Yield ``(index, char, depth)`` for every character outside string
    literals, ``depth`` being the nesting *before* the character; arrows are
    yielded as one ``"->"`` token that does not change the depth."""
    depth = 0
    in_str = False
    i = start
    n = len(text)
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == "-" and text.startswith("->", i):
            yield i, "->", depth
            i += 1
        else:
            yield i, c, depth
            if c in _OPEN:
                depth += 1
            elif c in _CLOSE:
                depth -= 1
        i += 1


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` at ``sep`` outside brackets and strings; parts are stripped."""
    parts = []
    begin = 0
    for i, c, depth in _scan(text):
        if c == sep and depth == 0:
            parts.append(text[begin:i].strip())
            begin = i + 1
    parts.append(text[begin:].strip())
    return parts


def matching_bracket(text: str, start: int) -> int:
    """Index of the bracket that closes the one at ``text[start]``."""
    for i, c, depth in _scan(text, start):
        if c in _CLOSE and depth == 1:
            return i
    raise ValueError(f"unbalanced {text[start]!r} at {start} in {text[:200]!r}")


def value_end(text: str, start: int) -> int:
    """End index of the value starting at ``start``: the first top-level
    ``,`` or the bracket that closes an enclosing one (or the text's end)."""
    for i, c, depth in _scan(text, start):
        if depth == 0 and (c == "," or c in _CLOSE):
            return i
    return len(text)


def find_top(text: str, token: str) -> int:
    """Index of the first ``token`` outside brackets and strings, or -1."""
    for i, c, depth in _scan(text):
        if depth == 0 and text.startswith(token, i):
            return i
    return -1


def net_depth(text: str) -> int:
    """How many brackets ``text`` leaves open (negative if it closes more)."""
    depth = 0
    for _, c, before in _scan(text):
        depth = before + int(c in _OPEN) - int(c in _CLOSE)
    return depth
