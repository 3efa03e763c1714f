"""``anyshape.Scheduler``: continuous batching, each request's tokens against
``generate`` on that request alone.

Requests of mixed prompt lengths (1 to 333), ``max_new_tokens`` and stop
tokens arrive at random steps of one scheduler, join the running batch and
leave it; each one's greedy tokens must be those ``Generator.generate`` gives
for it alone. The generators are ``test_generate.py``'s small random-weight
families (weights of 0.3, so that greedy rows vary).
"""

from __future__ import annotations

import random

import pytest
import torch
from test_generate import VOCAB, small_causal_lm

import anyshape

_built: dict[str, object] = {}


def _generator(model_type: str):
    if model_type not in _built:
        _built[model_type] = anyshape.compile_generator(
            small_causal_lm(model_type, initializer_range=0.3))
    return _built[model_type]


def _alone(generator, prompt: torch.Tensor, new: int, eos: list[int]) -> list[int]:
    out = generator.generate(prompt[None], max_new_tokens=new, eos_token_id=eos or None,
                             pad_token_id=0)[0, len(prompt):]
    tokens = out.tolist()
    for at, token in enumerate(tokens):  # HF pads after a stop; the request ends there
        if token in eos:
            return tokens[:at + 1]
    return tokens


def _requests(generator, count: int, seed: int):
    """(prompt, max_new_tokens, stop tokens, step it arrives at, tokens alone)."""
    pick = random.Random(seed)
    requests = []
    for number in range(count):
        length = pick.choice([1, 3, 7, 12, 17, 33, 65, 333])
        prompt = torch.randint(3, VOCAB, (length,),
                               generator=torch.Generator().manual_seed(seed * 100 + number))
        new = pick.choice([1, 2, 5, 16, 40, 64])
        # No stop token, or one greedy decoding reaches halfway (so that it stops there).
        eos = []
        if new > 2 and pick.random() < 0.4:
            eos = [_alone(generator, prompt, new, [])[new // 2]]
        requests.append((prompt, new, eos, pick.randint(0, 30), _alone(generator, prompt, new, eos)))
    return requests


def _serve(scheduler, requests):
    """Each request submitted at its step; the handles once all have finished,
    and after each step how many ran, waited, and the buffers' slots."""
    handles, step, order = {}, 0, sorted(range(len(requests)), key=lambda i: requests[i][3])
    seen = []
    while order or scheduler.running or scheduler.waiting:
        while order and requests[order[0]][3] <= step:
            number = order.pop(0)
            prompt, new, eos, _, _ = requests[number]
            handles[number] = scheduler.submit(prompt, max_new_tokens=new, eos_token_id=eos)
        scheduler.step()
        seen.append((scheduler.running, scheduler.waiting, scheduler._capacity))
        step += 1
        assert step < 2000, "the requests did not finish"
    return handles, seen


@pytest.mark.builds_after_export
@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_requests_joining_at_random_steps_get_their_tokens_alone(model_type):
    generator = _generator(model_type)
    requests = _requests(generator, 18, seed=1)
    scheduler = anyshape.Scheduler(generator)
    handles, seen = _serve(scheduler, requests)
    assert max(running for running, _, _ in seen) > 1, \
        "no two requests ran together: the test says nothing"
    for number, (prompt, new, eos, at, alone) in enumerate(requests):
        request = handles[number]
        assert request.tokens == alone, \
            f"request {number} (prompt {len(prompt)}, {new} new, stop {eos}, at step {at})"
        assert request.finish_reason == ("stop" if eos and alone[-1] in eos else "length")
        assert torch.equal(request.sequence(), torch.cat([prompt, torch.tensor(alone)]))
    assert scheduler.running == 0 and scheduler.waiting == 0


@pytest.mark.builds_after_export
def test_a_bounded_cache_makes_requests_wait_and_gives_the_same_tokens():
    """A budget of 140 slots a row: a second long request, 30 steps after the
    first, would need 159 (its prompt ends where the first has reached), so it
    waits until the first finishes, and the requests queued behind it too;
    each gets its tokens alone, and the buffers never pass the budget."""
    generator = _generator("gpt2")
    arrivals = [(65, 64, 0), (65, 64, 30), (7, 5, 31), (1, 16, 40), (33, 40, 100)]
    requests = []
    for number, (length, new, at) in enumerate(arrivals):
        prompt = torch.randint(3, VOCAB, (length,), generator=torch.Generator().manual_seed(number))
        requests.append((prompt, new, [], at, _alone(generator, prompt, new, [])))
    slot_bytes = anyshape.Scheduler(generator)._slot_bytes
    scheduler = anyshape.Scheduler(generator, cache_bytes=140 * slot_bytes)
    assert scheduler.max_slots == 140
    handles, seen = _serve(scheduler, requests)
    waited = [waiting for _, waiting, _ in seen]
    assert waited[30] == 1 and waited[40] == 3, waited[25:70]
    assert max(slots for _, _, slots in seen) <= scheduler.max_slots
    for number, (prompt, new, eos, at, alone) in enumerate(requests):
        assert handles[number].tokens == alone, f"request {number}"


def _sampled(generator, prompt, seeds, **sampling) -> list[list[int]]:
    """Each seed's 24 sampled tokens, a scheduler for each."""
    runs = []
    for seed in seeds:
        scheduler = anyshape.Scheduler(generator)
        request = scheduler.submit(prompt, max_new_tokens=24, eos_token_id=[], do_sample=True,
                                   seed=seed, **sampling)
        scheduler.run()
        runs.append(request.tokens)
    return runs


@pytest.mark.builds_after_export
def test_sampling_with_a_seed_repeats_and_stays_in_the_top_k():
    generator = _generator("gpt2")
    prompt = torch.randint(3, VOCAB, (9,), generator=torch.Generator().manual_seed(5))
    runs = _sampled(generator, prompt, (7, 7, 8), temperature=0.9, top_k=1)
    # top_k=1 is greedy whatever the seed.
    assert runs[0] == runs[1] == runs[2] == _alone(generator, prompt, 24, [])
    drawn = _sampled(generator, prompt, (7, 7, 8), temperature=1.5, top_p=0.95)
    assert drawn[0] == drawn[1] and drawn[0] != drawn[2]


@pytest.mark.builds_after_export
@pytest.mark.parametrize("arguments, match", [
    (dict(input_ids=torch.ones(2, 3, dtype=torch.long), max_new_tokens=4),
     r"input_ids: expected one prompt"),
    (dict(input_ids=torch.tensor([3, VOCAB]), max_new_tokens=4),
     r"input_ids: expected token ids in \[0, 256\)"),
    (dict(input_ids=torch.tensor([3.0]), max_new_tokens=4), r"input_ids: expected integer"),
    (dict(input_ids=torch.tensor([3]), max_new_tokens=0), r"max_new_tokens: expected a positive"),
    (dict(input_ids=torch.tensor([3] * 500), max_new_tokens=20),
     r"max_new_tokens: the prompt's 500 tokens and 20 new ones exceed the model's 512"),
    (dict(input_ids=torch.tensor([3]), max_new_tokens=4, eos_token_id=VOCAB),
     r"eos_token_id: expected token ids in \[0, 256\)"),
    (dict(input_ids=torch.tensor([3]), max_new_tokens=4, do_sample=True, top_p=0.0),
     r"top_p: expected a number in \(0, 1\]"),
    (dict(input_ids=torch.tensor([3]), max_new_tokens=4, do_sample=True, temperature=0),
     r"temperature: expected a number above 0"),
])
def test_negative_bad_requests_are_refused_naming_the_argument(arguments, match):
    scheduler = anyshape.Scheduler(_generator("gpt2"))
    input_ids = arguments.pop("input_ids")
    with pytest.raises((ValueError, TypeError), match=match):
        scheduler.submit(input_ids, **arguments)
    assert scheduler.waiting == 0


@pytest.mark.builds_after_export
def test_negative_a_request_the_budget_can_never_hold_is_refused():
    generator = _generator("gpt2")
    probe = anyshape.Scheduler(generator)
    scheduler = anyshape.Scheduler(generator, cache_bytes=50 * probe._slot_bytes)
    with pytest.raises(ValueError, match=r"max_new_tokens: the prompt's 40 tokens and 20 new "
                                         r"ones need 60 slots, more than cache_bytes allows \(50\)"):
        scheduler.submit(torch.full((40,), 3), max_new_tokens=20)
    with pytest.raises(ValueError, match=r"cache_bytes: expected an int of at least"):
        anyshape.Scheduler(generator, cache_bytes=probe._slot_bytes)
    with pytest.raises(ValueError, match=r"rows: expected a positive int, got 0"):
        anyshape.Scheduler(generator, rows=0)


@pytest.mark.builds_after_export
def test_a_cancelled_request_frees_its_row_and_the_others_keep_their_tokens():
    """/// Cancelled while waiting, and while running: it ends "cancelled"
    with the tokens it had, its row takes the next request, and the requests
    beside it get their tokens alone."""
    generator = _generator("gpt2")
    scheduler = anyshape.Scheduler(generator, rows=2)
    prompts = [torch.randint(3, VOCAB, (length,), generator=torch.Generator().manual_seed(length))
               for length in (5, 9, 13, 3)]
    kept = scheduler.submit(prompts[0], max_new_tokens=30)
    cut = scheduler.submit(prompts[1], max_new_tokens=30)
    never = scheduler.submit(prompts[2], max_new_tokens=30)
    late = scheduler.submit(prompts[3], max_new_tokens=12)
    assert scheduler.cancel(never) and never.finish_reason == "cancelled" and not never.tokens
    for _ in range(5):
        scheduler.step()
    assert scheduler.running == 2 and scheduler.waiting == 1
    # Five steps: the prefill's token and five decoded ones.
    assert scheduler.cancel(cut) and cut.finish_reason == "cancelled" and len(cut.tokens) == 6
    assert scheduler.running == 1 and not scheduler.cancel(cut)
    scheduler.run()
    assert kept.tokens == _alone(generator, prompts[0], 30, [])
    assert late.tokens == _alone(generator, prompts[3], 12, [])
    assert cut.tokens == _alone(generator, prompts[1], 30, [])[:6]
