"""Kubernetes resource quantities ("500m", "1Gi", "2.5", "1e3") decoded to
integers the way k8s.io/apimachinery's resource.Quantity does: Value() and
MilliValue() round up to the next integer."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)


class QuantityError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Quantity:
    exact: Fraction

    def value(self) -> int:
        """Rounded up to a whole unit (Quantity.Value)."""
        return _ceil(self.exact)

    def milli(self) -> int:
        """In thousandths, rounded up (Quantity.MilliValue)."""
        return _ceil(self.exact * 1000)


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def parse_quantity(text: str) -> Quantity:
    """Parses a quantity; QuantityError says what is wrong with it."""
    m = _QUANTITY.match(text.strip())
    if m is None:
        raise QuantityError(
            f"quantity {text!r} is not a Kubernetes quantity (e.g. 500m, 2, 1Gi, 1e3)"
        )
    value = Fraction(m["num"])
    if m["bin"]:
        value *= _BINARY[m["bin"]]
    elif m["exp"]:
        value *= Fraction(10) ** int(m["exp"][1:])
    else:
        value *= _DECIMAL[m["dec"] or ""]
    if m["sign"] == "-":
        value = -value
    return Quantity(value)
