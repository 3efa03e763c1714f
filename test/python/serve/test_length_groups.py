"""``EncoderEngine``: its batches split by length (``length_groups``), so that
a long input does not make short ones pay its length; a failed thread fails
its callers instead of leaving them waiting."""

from __future__ import annotations

import random

import pytest

import threading

import torch

from anyshape.serve.engine import EncoderEngine, length_groups


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


def test_the_batches_rows_come_back_in_order():
    engine = EncoderEngine(lambda ids, mask: ids[:, :1].float() * 10 + mask.sum(1, True))
    got, done = [], threading.Event()
    try:
        engine.submit([[5] * 30, [1], [2, 2], [3] * 9], lambda rows, error: (got.append(rows),
                                                                           done.set()))
        assert done.wait(10)
    finally:
        engine.close()
    assert got[0].flatten().tolist() == [80.0, 11.0, 22.0, 39.0]


def test_a_failed_thread_fails_its_callers_and_refuses_more(monkeypatch):
    """/// An error outside a batch's own try (here the padding) ends the
    thread: the waiting callers get it, and a later submission is refused."""
    engine = EncoderEngine(lambda ids, mask: ids.float(), wait_s=0.2)
    monkeypatch.setattr(engine, "_padded", lambda inputs: (_ for _ in ()).throw(SystemExit(3)))
    errors, done = [], threading.Event()

    def record(rows, error):
        errors.append(error)
        if len(errors) == 2:
            done.set()
    engine.submit([[1]], record)
    engine.submit([[2]], record)
    assert done.wait(10) and all(isinstance(e, SystemExit) for e in errors), errors
    engine._thread.join(10)
    assert not engine.alive
    with pytest.raises(RuntimeError, match="the engine is closed"):
        engine.submit([[3]], record)
