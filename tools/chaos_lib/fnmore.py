"""More of the function library in the generator (drawn after ``fnlib``'s
expressions, so earlier seeds keep their cases): ``initcap``, ``lpad``,
``rpad``, the transcendental functions, ``hash``, ``xxhash64``,
``element_at`` of a ``split`` and ``F.expr``; each as the DSL text and a plain
Python reference to Spark's documented semantics (never eddyline's code).

The hashes are Spark's, written from its algorithms: ``hash`` is Murmur3
x86_32 with seed 42 (a long as its low then high 32-bit word; a string's
bytes four at a time, then each remaining byte, sign-extended, as a word of
its own: Spark's ``hashUnsafeBytes``), ``xxhash64`` is XXH64 with seed 42 (a
long as its 8 little-endian bytes); a null input leaves the seed, so
``hash(null)`` is 42. Transcendental results may differ from Python's in the
last bit (docs/API.md): the comparison's float tolerance covers that.
"""

from __future__ import annotations

import math
import random
from typing import Any

from .fnlib import Template, _null

M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & M32


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & M32
    return (_rotl32(k1, 15) * 0x1B873593) & M32


def _mix_h1(h1: int, k1: int) -> int:
    h1 = _rotl32(h1 ^ k1, 13)
    return (h1 * 5 + 0xE6546B64) & M32


def _fmix32(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def murmur3_long(value: int, seed: int = 42) -> int:
    word = value & M64
    h1 = _mix_h1(seed, _mix_k1(word & M32))
    h1 = _mix_h1(h1, _mix_k1(word >> 32))
    return _fmix32(h1, 8)


def murmur3_bytes(data: bytes, seed: int = 42) -> int:
    h1 = seed
    aligned = len(data) - len(data) % 4
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i : i + 4], "little")))
    for b in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((b - 256 if b >= 128 else b) & M32))
    return _fmix32(h1, len(data))


P1, P2, P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P4, P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def _rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & M64


def xxh64_long(value: int, seed: int = 42) -> int:
    """XXH64 of the 8 little-endian bytes of ``value``, as a signed long."""
    h = (seed + P5 + 8) & M64
    k = (_rotl64(((value & M64) * P2) & M64, 31) * P1) & M64
    h = ((_rotl64(h ^ k, 27) * P1) + P4) & M64
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    h ^= h >> 32
    return h - (1 << 64) if h >= 1 << 63 else h


def _initcap(s: str) -> str:
    # Spark: each word (split on spaces) upper-cased first letter, the rest lower
    return " ".join(w[:1].upper() + w[1:].lower() for w in s.split(" "))


def _pad(s: str, n: int, pad: str, left: bool) -> str:
    if n <= len(s):
        return s[:n]
    fill = (pad * n)[: n - len(s)]
    return fill + s if left else s + fill


def _element(s: str, i: int) -> str | None:
    parts = s.split(" ")  # Java's split as Spark calls it: empty strings kept
    if i > len(parts) or -i > len(parts):
        return None
    return parts[i - 1] if i > 0 else parts[i]


MATH = {
    "sqrt": math.sqrt,
    "cbrt": lambda x: math.copysign(abs(x) ** (1 / 3), x),
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "log2": math.log2,
}

EXPRS = [
    ("v * 2 + k - id % 3", lambda w: w["v"] * 2 + w["k"] - w["id"] % 3),
    (
        "CASE WHEN vn IS NULL THEN 'none' WHEN vn > 10 THEN 'big' ELSE 'small' END",
        lambda w: "none" if w["vn"] is None else "big" if w["vn"] > 10 else "small",
    ),
    ("length(s) + 1", lambda w: None if w["s"] is None else len(w["s"]) + 1),
]


class Explode(list[Any]):
    """A generator's reference value: the row becomes one row per element
    (``reference.functions``)."""


def _explode_outer(s: str | None) -> Explode:
    # explode_outer keeps a null array as one row with a null element
    return Explode([None] if s is None else s.split(" "))


JSON = 'F.from_json(F.to_json(F.struct("k", "s", "vn")), "k BIGINT, s STRING, vn BIGINT")'

MORE: dict[str, Template] = {
    "initcap": (lambda r: [], lambda: 'F.initcap("s")', lambda w: _null(_initcap)(w["s"])),
    "lpad": (
        lambda r: [r.randint(0, 9), r.choice(["*", "xy"])],
        lambda n, p: f'F.lpad("s", {n}, {p!r})',
        lambda w, n, p: _null(_pad)(w["s"], n, p, True),
    ),
    "rpad": (
        lambda r: [r.randint(0, 9), r.choice(["*", "xy"])],
        lambda n, p: f'F.rpad("s", {n}, {p!r})',
        lambda w, n, p: _null(_pad)(w["s"], n, p, False),
    ),
    "math": (
        lambda r: [r.choice(sorted(MATH))],
        lambda f: f'F.{f}("f")',
        lambda w, f: _null(MATH[f])(w["f"]),
    ),
    "pow": (
        lambda r: [r.choice([2, 0.5])],
        lambda e: f'F.pow("f", {e})',
        lambda w, e: _null(lambda x: x**e)(w["f"]),
    ),
    "hash": (
        lambda r: [r.choice(["s", "k"])],
        lambda c: f'F.hash("{c}")',
        lambda w, c: (
            42 if w[c] is None else murmur3_bytes(w[c].encode()) if c == "s" else murmur3_long(w[c])
        ),
    ),
    "xxhash64": (
        lambda r: [r.choice(["k", "id"])],
        lambda c: f'F.xxhash64("{c}")',
        lambda w, c: xxh64_long(w[c]),
    ),
    "element_at": (
        lambda r: [r.choice([1, 2, 3, -1, -2])],
        lambda i: f'F.element_at(F.split("s", " "), {i})',
        lambda w, i: _null(_element)(w["s"], i),
    ),
    "explode_outer": (
        lambda r: [],
        lambda: 'F.explode_outer(F.split("s", " "))',
        lambda w: _explode_outer(w["s"]),
    ),
    "from_json": (
        lambda r: [r.choice(["k", "s", "vn"])],
        lambda field: f'{JSON}.getField("{field}")',
        lambda w, field: w[field],  # to_json leaves a null out, from_json reads it as null
    ),
    "expr": (
        lambda r: [r.randrange(len(EXPRS))],
        lambda i: f"F.expr({EXPRS[i][0]!r})",
        lambda w, i: EXPRS[i][1](w),
    ),
}


def ansi_safe(exprs: list[list[Any]]) -> bool:
    """Whether no expression of a ``fn`` stage may fail a job in ANSI mode on
    the generated rows: a cast of "" to int does (docs/API.md "Functions"),
    and element_at beyond the array does in Spark's ANSI mode (eddyline
    documents only casts and time strings: not drawn together), as does
    ansi.py's ``ansi_cast``, drawn to fail."""
    flat = [e[1] if e[0] == "filter" else e for e in exprs]
    return not any(e[0] in ("element_at", "ansi_cast") or e[:2] == ["cast", 2] for e in flat)


def widen(rng: random.Random, exprs: list[list[Any]]) -> None:
    """Adds one to three of these expressions to a ``fn`` stage's."""
    for name in rng.sample(sorted(MORE), rng.randint(1, 3)):
        exprs.append([name, *MORE[name][0](rng)])
