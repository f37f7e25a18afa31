"""Kubernetes resource quantities ("64", "64000m", "256Gi", "1.5", "1e3") as exact numbers.

A node's allocatable CPU and memory and a VM's requests are quantities; placement counts
CPU in millicores and memory in bytes, both rounded up like the scheduler rounds a request
(a request of 0.5m CPU still takes 1m).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    # Decimal SI.
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    # Binary SI.
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
# The quantity grammar of k8s.io/apimachinery: a signed decimal number, then a binary or
# decimal SI suffix or a decimal exponent (e3, E-2).
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?$"
)


class QuantityError(ValueError):
    """A string that is no Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity: "1536Mi" → 1610612736, "250m" → 1/4."""
    if isinstance(text, bool):
        raise QuantityError(f"{text!r} is not a quantity")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        return Fraction(str(text))
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity")
    value = Fraction(match["number"])
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > 60:
            raise QuantityError(f"{text!r} is out of range")
        return value * Fraction(10) ** exponent
    return value * _SUFFIXES[match["suffix"] or ""]


def millicores(text: str | int | float) -> int:
    """CPU in millicores, rounded up: "2" → 2000, "250m" → 250, "0.1" → 100."""
    return math.ceil(parse_quantity(text) * 1000)


def byte_count(text: str | int | float) -> int:
    """Memory in bytes, rounded up: "256Gi" → 274877906944, "1G" → 10**9."""
    return math.ceil(parse_quantity(text))
