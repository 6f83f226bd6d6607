"""Kubernetes resource quantities ("500m", "1Gi", "2.5", "1e3") decoded to
integers the way k8s.io/apimachinery's resource.Quantity does.

The grammar is upstream's (staging/src/k8s.io/apimachinery/pkg/api/resource/
quantity.go parseQuantityString and ParseQuantity, suffix.go interpret):
an optional sign, digits with an optional decimal point, then one suffix:
n u m "" k M G T P E, Ki Mi Gi Ti Pi Ei, or e/E and a signed integer exponent.
Its quirks are kept: a sign or point alone ("-", ".") and a bare suffix
("Ki", "e5") are zero, while a bare "Pi", "Ei" or exponent below -9 is
refused (upstream sends those through inf.Dec, which wants a digit).

Values follow upstream's saturation rules (the Quantity doc comment: "no
quantity may represent a number greater than 2^63-1 in magnitude, nor may it
have more than 3 decimal places. Numbers larger or more precise will be capped
or rounded up"): a value is rounded away from zero to a whole nano unit
(ParseQuantity's ``amount.Round(amount, Nano.infScale(), inf.RoundUp)``, so
"1e-999999999" is 1n) and its magnitude capped at 2^63-1 (ParseQuantity's
``maxAllowed``, so "1e999999999" and "9223372036854775807Ei" are both
9223372036854775807). Value() and MilliValue() round up to a whole unit or
thousandth and stay within int64. Two departures, both where upstream's own
arithmetic overflows rather than means something: an exponent beyond int32
saturates instead of wrapping (suffix.go's ``int32(parsed)``), and a decimal
value beyond int64 is capped like a binary one instead of overflowing
int64Amount/scaledValue.

Every answer costs O(len(text)) with small integers: huge and tiny exponents
are recognised from the position of the leading digit before any arithmetic,
and text longer than MAX_QUANTITY_LENGTH is refused at once. Upstream has no
such limit, but a quantity that went through the API server is canonical
(under 30 characters) and annotations or CRD strings longer than this are
not quantities anyone meant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

__all__ = [
    "INT64_MAX",
    "MAX_QUANTITY_LENGTH",
    "Quantity",
    "QuantityError",
    "parse_quantity",
    "shorten",
]

MAX_QUANTITY_LENGTH: Final = 1024
INT64_MAX: Final = 2**63 - 1
_INT64_MIN: Final = -(2**63)
_NANO: Final = 10**9
# ParseQuantity's maxAllowed (2^63-1) in nano units.
_MAX_NANOS: Final = INT64_MAX * _NANO

# (base, exponent) per suffix: suffix.go newSuffixer's tables.
_SUFFIXES: Final[dict[str, tuple[int, int]]] = {
    "n": (10, -9),
    "u": (10, -6),
    "m": (10, -3),
    "": (10, 0),
    "k": (10, 3),
    "M": (10, 6),
    "G": (10, 9),
    "T": (10, 12),
    "P": (10, 15),
    "E": (10, 18),
    "Ki": (2, 10),
    "Mi": (2, 20),
    "Gi": (2, 30),
    "Ti": (2, 40),
    "Pi": (2, 50),
    "Ei": (2, 60),
}

# parseQuantityString as one linear scan: sign, leading zeros, the rest of
# the integer digits, an optional point and fraction digits, then the suffix:
# letters of "eEinumkKMGTP", an optional sign and digits. Every quantifier is
# possessive, so a string that fails costs one pass, never backtracking.
_SCAN: Final = re.compile(r"([+-]?+)(0*+)([0-9]*+)(?:\.([0-9]*+))?+([eEinumkKMGTP]*+[+-]?+[0-9]*+)")
_EXPONENT: Final = re.compile(r"[eE]([+-]?+[0-9]++)")

# A leading digit at 10^19 or above is past 2^63-1 (~9.22e18) whatever
# follows; one at 10^-29 or below is under 1n even times 2^60 (Ei).
_TOP_POSITION: Final = 19
_BOTTOM_POSITION: Final = -29


class QuantityError(ValueError):
    pass


def shorten(value: object, limit: int = 64) -> str:
    """``value`` as repr, cut to about ``limit`` characters: user-controlled
    values quoted in reasons, events and logs stay short (and a huge integer
    is never turned into its digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<an integer of {value.bit_length()} bits>"
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value)} characters)"
    try:
        text = repr(value)
    except ValueError:  # an integer too long for str() inside a container
        return f"<a {type(value).__name__} too large to show>"
    except RecursionError:  # JSON nested deeper than repr() recurses
        return f"<a {type(value).__name__} nested too deep to show>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


@dataclass(frozen=True, slots=True)
class Quantity:
    """A parsed quantity in nano units (10^-9), |nanos| <= (2^63-1) * 10^9."""

    nanos: int

    @property
    def exact(self) -> Fraction:
        """The value as a fraction (a multiple of 10^-9)."""
        return Fraction(self.nanos, _NANO)

    def value(self) -> int:
        """Rounded up to a whole unit, away from zero (Quantity.Value)."""
        return _away(self.nanos, _NANO)

    def milli(self) -> int:
        """In thousandths, rounded up away from zero (Quantity.MilliValue),
        capped to int64 where upstream's would overflow."""
        return max(min(_away(self.nanos, 10**6), INT64_MAX), -INT64_MAX)


def _away(nanos: int, unit: int) -> int:
    """nanos / unit rounded away from zero (what Value's doc comment says;
    upstream's int64 path does so, its inf.Dec path mis-rounds negatives)."""
    whole = -((-abs(nanos)) // unit)
    return whole if nanos >= 0 else -whole


_ZERO: Final = Quantity(0)


def _format_error(text: str) -> QuantityError:
    # quantity.go ErrFormatWrong.
    return QuantityError(
        f"quantity {shorten(text)} is not a Kubernetes quantity (e.g. 500m, 2, 1Gi, 1e3)"
    )


def parse_quantity(text: str) -> Quantity:
    """Parses a quantity as resource.ParseQuantity does; QuantityError says
    what is wrong with it."""
    if len(text) > MAX_QUANTITY_LENGTH:
        raise QuantityError(
            f"quantity {shorten(text)} is longer than {MAX_QUANTITY_LENGTH} characters "
            "(a Kubernetes quantity such as 1500m or 1.5Gi is a few characters)"
        )
    if not text:
        raise _format_error(text)
    m = _SCAN.fullmatch(text)
    if m is None:
        raise _format_error(text)
    sign, zeros, num, frac, suffix = m.groups()
    frac = frac or ""
    pair = _SUFFIXES.get(suffix)
    if pair is not None:
        base, exponent = pair
    else:
        # suffix.go interpret: e/E and an integer that strconv.ParseInt
        # reads as an int64.
        e = _EXPONENT.fullmatch(suffix)
        exponent = int(e[1]) if e is not None else 0
        if e is None or not _INT64_MIN <= exponent <= INT64_MAX:
            raise QuantityError(
                f"quantity {shorten(text)}: unknown suffix {shorten(suffix, 16)} "
                "(want one of n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or e<exponent>)"
            )
        base = 10
    digits = num + frac
    if not (zeros or digits):
        # No digit at all: upstream's int64 fast path reads it as zero, its
        # inf.Dec path (a bare Pi or Ei, an exponent below -9) refuses it.
        if (base == 2 and exponent >= 50) or (base == 10 and exponent < -9):
            raise QuantityError(f"quantity {shorten(text)}: its number has no digits")
        return _ZERO
    significant = digits.lstrip("0")
    mantissa = significant.rstrip("0")
    if not mantissa:
        return _ZERO
    # value = mantissa * 10^exp10 * 2^shift
    exp10 = len(significant) - len(mantissa) - len(frac)
    shift = 0
    if base == 10:
        exp10 += exponent
    else:
        shift = exponent
    position = len(mantissa) - 1 + exp10
    if position >= _TOP_POSITION:
        nanos = _MAX_NANOS
    elif position <= _BOTTOM_POSITION:
        nanos = 1
    else:
        scaled = int(mantissa) << shift
        nano_exp = exp10 + 9
        if nano_exp >= 0:
            nanos = scaled * 10**nano_exp
        else:
            nanos, rest = divmod(scaled, 10**-nano_exp)
            if rest:
                nanos += 1
        nanos = min(nanos, _MAX_NANOS)
    return Quantity(-nanos if sign == "-" else nanos)
