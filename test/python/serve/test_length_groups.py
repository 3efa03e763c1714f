"""``length_groups``: an encoder's batch split by length, so that a long input
does not make short ones pay its length."""

from __future__ import annotations

import random

import pytest

from anyshape.serve.engine import length_groups


def test_a_long_input_runs_apart_from_short_ones():
    assert length_groups([5, 100, 6, 7, 30, 28, 5], 0.5) == [[0, 6, 2, 3], [5, 4], [1]]


def test_equal_lengths_stay_one_group_and_nothing_is_nothing():
    assert length_groups([10] * 5, 0.5) == [[0, 1, 2, 3, 4]]
    assert length_groups([], 0.5) == []


@pytest.mark.parametrize("seed", range(5))
def test_every_input_once_and_each_group_within_the_bound(seed):
    pick = random.Random(seed)
    lengths = [pick.choice([1, 3, 7, 17, 33, 65, 333]) for _ in range(pick.randint(1, 60))]
    groups = length_groups(lengths, 0.5)
    assert sorted(at for group in groups for at in group) == list(range(len(lengths)))
    for group in groups:
        real = sum(lengths[at] for at in group)
        padded = len(group) * max(lengths[at] for at in group)
        assert padded - real <= 0.5 * real or len(group) == 1
