"""berth.framework.units.parse_quantity against upstream's resource.ParseQuantity
(staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go ParseQuantity,
Quantity.Value, Quantity.MilliValue; suffix.go interpret).

The expected values of the ordinary cases are what apimachinery v0.36.3's
ParseQuantity(s).Value() and .MilliValue() return. The hostile cases (huge
and tiny exponents, long strings) follow ParseQuantity's saturation: rounded
up to 1n, capped at 2^63-1; each must be answered at once (the timeout
bounds the whole test; upstream's own inf.Dec rounding of 1e999999999 and
Berth's previous Fraction(10) ** exp took seconds to minutes).
"""

from __future__ import annotations

import pytest

from berth.framework.units import (
    INT64_MAX,
    MAX_QUANTITY_LENGTH,
    QuantityError,
    parse_quantity,
    shorten,
)

MAX = INT64_MAX  # ParseQuantity's maxAllowed


@pytest.mark.parametrize(
    ("text", "value", "milli"),
    [
        # Ordinary quantities (values from upstream's ParseQuantity).
        pytest.param("0", 0, 0, id="zero"),
        pytest.param("500m", 1, 500, id="milli"),
        pytest.param("1.5", 2, 1500, id="fraction-rounds-up"),
        pytest.param("2", 2, 2000, id="integer"),
        pytest.param("1Gi", 2**30, 2**30 * 1000, id="binary"),
        pytest.param("1.5Gi", 1610612736, 1610612736000, id="binary-fraction"),
        pytest.param("100Mi", 104857600, 104857600000, id="mebi"),
        pytest.param("1k", 1000, 1000000, id="kilo"),
        pytest.param("1E", 10**18, MAX, id="exa-milli-capped-where-upstream-overflows"),
        pytest.param("1e3", 1000, 1000000, id="exponent"),
        pytest.param("1E+2", 100, 100000, id="capital-exponent-with-sign"),
        pytest.param("12e-3", 1, 12, id="negative-exponent"),
        pytest.param("0.1m", 1, 1, id="sub-milli-rounds-up"),
        pytest.param("1.000000000001Ki", 1025, 1024001, id="binary-rounds-up-at-nano"),
        pytest.param("+5", 5, 5000, id="plus-sign"),
        pytest.param("-651m", -1, -651, id="negative-away-from-zero"),
        pytest.param("5.", 5, 5000, id="trailing-point"),
        pytest.param(".5", 1, 500, id="leading-point"),
        pytest.param("007", 7, 7000, id="leading-zeros"),
        # Upstream's quirks: no digits but an int64 fast path reads zero.
        pytest.param("-", 0, 0, id="sign-alone-is-zero"),
        pytest.param(".", 0, 0, id="point-alone-is-zero"),
        pytest.param("Ki", 0, 0, id="bare-Ki-is-zero"),
        pytest.param("e5", 0, 0, id="bare-exponent-is-zero"),
        pytest.param("n", 0, 0, id="bare-nano-is-zero"),
        # Saturation (ParseQuantity's Round(Nano, RoundUp) and maxAllowed).
        pytest.param("1e999999999", MAX, MAX, id="huge-exponent-capped"),
        pytest.param("1e100000000", MAX, MAX, id="issue-22-poison-capped"),
        pytest.param("1e-999999999", 1, 1, id="tiny-exponent-rounds-up-to-1n"),
        pytest.param("1e2147483648", MAX, MAX, id="exponent-past-int32-saturates"),
        pytest.param("1e-9223372036854775808", 1, 1, id="int64-min-exponent"),
        pytest.param("9223372036854775807Ei", MAX, MAX, id="max-int64-Ei-capped"),
        pytest.param("9223372036854775807", MAX, MAX, id="max-int64-milli-capped"),
        pytest.param("9223372036854775808", MAX, MAX, id="past-int64-capped"),
        pytest.param("0.000000000001m", 1, 1, id="below-nano-rounds-up"),
        pytest.param("-1e999999999", -MAX, -MAX, id="huge-negative-capped"),
        pytest.param("1" * MAX_QUANTITY_LENGTH, MAX, MAX, id="longest-digit-string"),
        pytest.param("0" * (MAX_QUANTITY_LENGTH - 1) + "1", 1, 1000, id="long-leading-zeros"),
        pytest.param("0." + "0" * 1000 + "1", 1, 1, id="long-fraction-rounds-up"),
        pytest.param(
            "." + "0" * 28 + "1Ei", 1, 1, id="tiny-times-Ei-rounds-up"
        ),  # 1e-29 * 2^60 < 1n
    ],
)
@pytest.mark.timeout(5)
def test_parse_quantity_matches_resource_parse_quantity(text: str, value: int, milli: int) -> None:
    q = parse_quantity(text)
    assert (q.value(), q.milli()) == (value, milli)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        pytest.param("", "not a Kubernetes quantity", id="empty-ErrFormatWrong"),
        pytest.param(" 1", "not a Kubernetes quantity", id="leading-space-ErrFormatWrong"),
        pytest.param("1 ", "not a Kubernetes quantity", id="trailing-space-ErrFormatWrong"),
        pytest.param("1.1.1", "not a Kubernetes quantity", id="two-points-ErrFormatWrong"),
        pytest.param("1e5.5", "not a Kubernetes quantity", id="fractional-exponent"),
        pytest.param("abc", "not a Kubernetes quantity", id="letters"),
        pytest.param("\u0661", "not a Kubernetes quantity", id="non-ascii-digit"),
        pytest.param("1ki", "unknown suffix", id="lowercase-ki-ErrSuffix"),
        pytest.param("1e", "unknown suffix", id="bare-e-ErrSuffix"),
        pytest.param("1e+", "unknown suffix", id="exponent-without-digits"),
        pytest.param("1Ki5", "unknown suffix", id="suffix-then-digits"),
        pytest.param("1e9223372036854775808", "unknown suffix", id="exponent-past-int64"),
        pytest.param("Pi", "no digits", id="bare-Pi-ErrNumeric"),
        pytest.param("Ei", "no digits", id="bare-Ei-ErrNumeric"),
        pytest.param("e-10", "no digits", id="bare-small-exponent-ErrNumeric"),
        pytest.param("1" * (MAX_QUANTITY_LENGTH + 1), "longer than", id="too-long"),
        pytest.param("1e" + "9" * 10**6, "longer than", id="megabyte-exponent"),
    ],
)
@pytest.mark.timeout(5)
def test_parse_quantity_refuses_what_resource_parse_quantity_refuses(text: str, says: str) -> None:
    with pytest.raises(QuantityError, match=says) as info:
        parse_quantity(text)
    # The reason quotes the text, cut short: it ends up in events and logs.
    assert len(str(info.value)) < 300


@pytest.mark.timeout(10)
def test_hostile_quantities_each_answer_at_once() -> None:
    """Exponents of every size and long strings: each parse is small-integer
    work after one scan (no timing assert; the test's timeout is the bound)."""
    for digits in range(2, 19):
        for sign, value in (("", MAX), ("-", 1)):
            for mantissa in ("1", "9.99", "123456789.123456789"):
                assert parse_quantity(f"{mantissa}e{sign}{'9' * digits}").value() == value
    for n in (100, 500, MAX_QUANTITY_LENGTH - 4):
        assert parse_quantity("9" * n + "Ei").value() == MAX
        assert parse_quantity("0." + "0" * (n - 4) + "1Ki").milli() == 1


def test_shorten_quotes_json_nested_past_repr_depth() -> None:
    nested: list[object] = []
    for _ in range(5000):
        nested = [nested]
    assert shorten(nested) == "<a list nested too deep to show>"
