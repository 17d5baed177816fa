"""The counting functions."""

from __future__ import annotations

import pytest

from tally import top, words


def test_words_are_lower_cased_and_split_at_punctuation() -> None:
    assert words("It's a Cat, a CAT!") == ["it's", "a", "cat", "a", "cat"]


def test_top_counts_and_orders_by_frequency() -> None:
    assert top("b a b c b a", 2) == [("b", 3), ("a", 2)]


def test_ties_keep_the_order_of_first_use() -> None:
    assert top("x y z", 3) == [("x", 1), ("y", 1), ("z", 1)]


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        top("a", -1)
