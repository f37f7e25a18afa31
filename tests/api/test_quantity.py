"""Kubernetes quantities as the node fit reads them: CPU in millicores, memory in bytes."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpu_binder.api.quantity import QuantityError, byte_count, millicores, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("64", Fraction(64)),
        ("64000m", Fraction(64)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("256Gi", Fraction(256 * 2**30)),
        ("1Ti", Fraction(2**40)),
        ("512Ki", Fraction(512 * 1024)),
        ("1G", Fraction(10**9)),
        ("2k", Fraction(2000)),
        ("1e3", Fraction(1000)),
        ("5E-1", Fraction(1, 2)),
        ("100u", Fraction(1, 10**4)),
        (" 8 ", Fraction(8)),
        (3, Fraction(3)),
    ],
)
def test_a_quantity_has_its_exact_value(text: str | int, value: Fraction) -> None:
    assert parse_quantity(text) == value


def test_cpu_is_counted_in_millicores_rounded_up() -> None:
    assert millicores("64") == 64_000
    assert millicores("250m") == 250
    assert millicores("0.1") == 100
    assert millicores("100u") == 1  # a sliver of a millicore still takes one


def test_memory_is_counted_in_bytes() -> None:
    assert byte_count("262144Mi") == 262_144 * 2**20
    assert byte_count("1Gi") == 2**30
    assert byte_count("1.5Ki") == 1536


@pytest.mark.parametrize("text", ["", "Gi", "1.2.3", "12GB", "1e", "ten", "1 Gi", "--1"])
def test_what_is_no_quantity_is_refused(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)
