"""Random ids and secrets: base62, the asked length, every character equally likely."""

from __future__ import annotations

from collections import Counter

import pytest

from tenants.ids import BASE62, new_id, random_base62

# The chi-square statistic of 61 degrees of freedom exceeds this once in a million fair runs.
CHI2_61_ONE_IN_A_MILLION = 129.0


@pytest.mark.parametrize("length", [1, 16, 24, 32, 300])
def test_ids_have_the_asked_length_and_only_base62_characters(length: int) -> None:
    ids = [random_base62(length) for _ in range(200)]
    assert all(len(i) == length and set(i) <= set(BASE62) for i in ids)
    assert new_id("org").startswith("org_") and len(new_id("org")) == 4 + 16


def test_every_character_is_equally_likely() -> None:
    counts = Counter("".join(random_base62(32) for _ in range(4_000)))  # 128,000 characters
    expected = 128_000 / len(BASE62)
    chi2 = sum((counts[ch] - expected) ** 2 / expected for ch in BASE62)
    # A plain byte % 62 makes the first eight characters 25 % likelier: chi2 ≈ 800.
    assert chi2 < CHI2_61_ONE_IN_A_MILLION, (chi2, counts.most_common(3))


def test_ids_do_not_repeat() -> None:
    assert len({random_base62(16) for _ in range(20_000)}) == 20_000
