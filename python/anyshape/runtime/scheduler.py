"""``Scheduler``: continuous batching over a compiled causal LM (``Generator``).

Requests join the running batch at any step and leave it when they finish,
each with its own prompt, ``max_new_tokens``, stop tokens and sampling; no
call recompiles. The compiled step writes every row's new keys and values at
the same slot (the mask's length: ``generation/step.py``), so the rows share
one timeline of slots, and a row's tokens are a contiguous run of it that
ends at the timeline's end, its mask 0 elsewhere (left padding, as a padded
``generate`` call has):

- a joining request is prefilled alone (the step ``generate`` calls for one
  prompt, into a cache of its own), and the device copies its prompt's slots
  into its row, ending at the timeline's end. A prompt longer than the
  timeline so far first moves every row's slots right to make room;
- then each ``step`` decodes every active row at once (the decode function
  for the batch's rows: ``generation/model_spec.DECODE_ENTRIES``), one new
  slot for all;
- a finished request's row is free at once for the next one, and when no
  running row reads the timeline's first slots, the rows move left and the
  slots are reused.

The cache's memory is ``rows`` x slots x each slot's bytes, bounded by
``cache_bytes``: a request that would need more slots than that allows
waits until running requests finish; one that could never fit is refused
when submitted. Greedy tokens are the ones ``generate`` gives that request
alone, but for near ties: a row's logits come from a batch of another
shape than alone, within float32 rounding (``test_scheduler.py``).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np
import torch

from anyshape.runtime.generator import Generator, _token_ids, _torch_on_one_thread
from anyshape.runtime.host_arrays import numpy_dtype

# Slots new buffers keep free past the timeline (at least; a quarter more for
# longer ones), so that the next steps do not each copy the cache over.
GROWTH_SLOTS = 64


@dataclasses.dataclass(eq=False)
class Request:
    """One request: its prompt, what ends it, and its new tokens as they come
    (compared by identity: two requests of one prompt are two requests)."""

    prompt: torch.Tensor  # [length] token ids
    max_new_tokens: int
    stop_tokens: frozenset
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    tokens: list = dataclasses.field(default_factory=list)
    finish_reason: str | None = None  # "stop" (a stop token), "length" or "cancelled"
    _random: torch.Generator | None = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def sequence(self) -> torch.Tensor:
        """The prompt and the new tokens, [length + new] (the stop token included)."""
        return torch.cat([self.prompt, torch.tensor(self.tokens, dtype=torch.long)])


class Scheduler:
    """Continuous batching of ``generator``'s requests over ``rows`` cache rows
    (default: the largest batch with a decode function of its own, 8), whose
    keys and values take at most ``cache_bytes`` (default: no bound)."""

    def __init__(self, generator: Generator, *, rows: int | None = None,
                 cache_bytes: int | None = None):
        if not isinstance(generator, Generator) or generator.spec.get("kind") == "seq2seq":
            raise TypeError(f"generator: expected a causal LM's anyshape Generator "
                            f"(compile_generator), got {type(generator).__name__}")
        sizes = sorted(int(size) for size in generator.spec["decode_entries"])
        rows = rows if rows is not None else (sizes[-1] if sizes else 8)
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(f"rows: expected a positive int, got {rows!r}")
        self.generator = generator
        self.rows = rows
        self.cache_bytes = cache_bytes
        self._slot_bytes = rows * sum(heads * dim for layer in generator.spec["cache"]
                                      for heads, dim in layer) * \
            np.dtype(numpy_dtype(generator.spec["cache_dtype"])).itemsize
        if cache_bytes is not None and (isinstance(cache_bytes, bool) or
                                        not isinstance(cache_bytes, int) or
                                        cache_bytes < 2 * self._slot_bytes):
            raise ValueError(f"cache_bytes: expected an int of at least {2 * self._slot_bytes} "
                             f"(two slots of {rows} rows), got {cache_bytes!r}")
        # The most slots a buffer may have: the masked first one and the timeline's.
        self.max_slots = None if cache_bytes is None else cache_bytes // self._slot_bytes
        self._waiting: collections.deque[Request] = collections.deque()
        self._running: list[Request | None] = [None] * rows
        self._next: list[int] = [0] * rows  # each running row's next input token
        self._mask = torch.zeros(rows, 0, dtype=torch.long)  # the timeline, per row
        self._buffers: list | None = None
        self._capacity = 0

    # -- requests ------------------------------------------------------------
    def submit(self, input_ids: Any, **options) -> Request:
        """Queue a request: ``input_ids`` one prompt ([length] or [1, length]),
        with ``checked_request``'s options. It joins the batch at a later ``step``."""
        return self.enqueue(self.checked_request(input_ids, **options))

    def enqueue(self, request: Request) -> Request:
        """Queue a request made by ``checked_request`` (of this scheduler)."""
        self._waiting.append(request)
        return request

    def checked_request(self, input_ids: Any, *, max_new_tokens: int, eos_token_id=None,
                        do_sample: bool = False, temperature: float = 1.0, top_k: int = 0,
                        top_p: float = 1.0, seed: int | None = None) -> Request:
        """A request, checked but not queued (``enqueue``; it reads only what
        does not change, so that a server's threads may call it while another
        steps): ``input_ids`` one prompt ([length] or [1, length]);
        ``eos_token_id`` an id or ids that end it (default: the model's
        generation config's); greedy unless ``do_sample``, which draws from
        the logits scaled by ``temperature`` and cut to ``top_k`` and
        ``top_p``, seeded by ``seed``."""
        ids = torch.as_tensor(input_ids) if not isinstance(input_ids, torch.Tensor) else input_ids
        if ids.ndim == 1:
            ids = ids[None]
        if ids.ndim != 2 or ids.shape[0] != 1:
            raise ValueError(f"input_ids: expected one prompt, [length] or [1, length], got "
                             f"shape {tuple(ids.shape)}")
        prompt = _token_ids(ids, self.generator.vocab_size)[0]
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or \
                max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: expected a positive int, got {max_new_tokens!r}")
        limit = self.generator.max_positions
        if limit is not None and len(prompt) + max_new_tokens > limit:
            raise ValueError(f"max_new_tokens: the prompt's {len(prompt)} tokens and "
                             f"{max_new_tokens} new ones exceed the model's {limit} positions")
        # The masked first slot, the prompt's, and one a decode step for each new token but the last.
        slots = len(prompt) + max_new_tokens
        if self.max_slots is not None and slots > self.max_slots:
            raise ValueError(f"max_new_tokens: the prompt's {len(prompt)} tokens and "
                             f"{max_new_tokens} new ones need {slots} slots, more than "
                             f"cache_bytes allows ({self.max_slots})")
        stops = self._stop_tokens(eos_token_id)
        if not isinstance(do_sample, bool):
            raise TypeError(f"do_sample: expected a bool, got {do_sample!r}")
        if do_sample:
            if not isinstance(temperature, (int, float)) or not temperature > 0:
                raise ValueError(f"temperature: expected a number above 0, got {temperature!r}")
            if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
                raise ValueError(f"top_k: expected an int of at least 0, got {top_k!r}")
            if not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
                raise ValueError(f"top_p: expected a number in (0, 1], got {top_p!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed: expected an int or None, got {seed!r}")
        request = Request(prompt, max_new_tokens, stops, do_sample, float(temperature), top_k,
                          float(top_p), seed)
        if do_sample:
            request._random = torch.Generator()
            request._random.manual_seed(seed if seed is not None else torch.seed())
        return request

    def _stop_tokens(self, eos_token_id) -> frozenset:
        if eos_token_id is None:
            # The model's own: an id past the vocabulary (a shrunk config's) never comes.
            default = self.generator.generation_config.eos_token_id
            default = [] if default is None else [default] if isinstance(default, int) else default
            return frozenset(t for t in default if 0 <= t < self.generator.vocab_size)
        ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        for token in ids:
            if isinstance(token, bool) or not isinstance(token, int) or \
                    not 0 <= token < self.generator.vocab_size:
                raise ValueError(f"eos_token_id: expected token ids in [0, "
                                 f"{self.generator.vocab_size}), got {eos_token_id!r}")
        return frozenset(ids)

    def cancel(self, request: Request) -> bool:
        """End ``request`` now (``finish_reason`` "cancelled"): a waiting one
        leaves the queue; a running one frees its row, and its slots once no
        other running row reads them. False where it had already ended."""
        if request.done:
            return False
        if request in self._waiting:
            self._waiting.remove(request)
        else:
            row = next((row for row, running in enumerate(self._running) if running is request),
                       None)
            if row is None:
                raise ValueError("request: not one of this scheduler's")
            self._running[row] = None
            self._mask[row] = 0
            self._next[row] = 0
            self._release_unread_slots()
        request.finish_reason = "cancelled"
        return True

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return sum(request is not None for request in self._running)

    # -- steps ---------------------------------------------------------------
    def step(self) -> list[Request]:
        """Admit the waiting requests that fit (each prefilled, its first new
        token chosen), then decode one token of every running row. Returns the
        requests that finished in this step."""
        finished: list[Request] = []
        with _torch_on_one_thread():
            self._admit(finished)
            if self.running:
                self._decode(finished)
            self._release_unread_slots()
        return finished

    def run(self) -> list[Request]:
        """Step until no request waits or runs; the requests in the order they finished."""
        finished = []
        while self._waiting or self.running:
            finished += self.step()
        return finished

    def _admit(self, finished: list[Request]) -> None:
        while self._waiting and None in self._running:
            request = self._waiting[0]
            if not self._fits(request):
                if self.running:
                    return  # waits for running requests to finish
                raise AssertionError("a request that fits an empty cache was refused")
            self._waiting.popleft()
            row = self._running.index(None)
            logits = self._prefill(request, row)
            self._running[row] = request
            self._take(row, logits, finished)

    def _fits(self, request: Request) -> bool:
        if self.max_slots is None:
            return True
        return self._slots_needed(request) <= self.max_slots

    def _slots_needed(self, joining: Request) -> int:
        """The slots the running rows and ``joining`` need until they end, once
        the columns no running row reads are dropped: the masked first slot
        and the timeline's last width (each decode step adds a column)."""
        width = self._mask.shape[1] - self._first_read()
        pad = max(0, len(joining.prompt) - width)  # a longer prompt moves the rows right
        ends = [width + pad + request.max_new_tokens - len(request.tokens)
                for request in self._running if request is not None]
        ends.append(width + pad + joining.max_new_tokens - 1)
        return 1 + max(ends)

    def _prefill(self, request: Request, row: int) -> torch.Tensor:
        """``request``'s prompt run alone, its slots then copied into ``row``,
        ending at the timeline's end; the logits of its last token."""
        generator = self.generator
        length = len(request.prompt)
        own = generator._empty_cache(1, length + 1)
        logits = generator._step(request.prompt[None], torch.ones(1, length, dtype=torch.long),
                                 own)[0]
        first, width = self._first_read(), self._mask.shape[1]
        if width - first < length:  # rows moved right, the unread columns dropped
            self._relayout(drop=first, pad=length - (width - first), slots=1 + length + 1)
        elif self._buffers is None or self._capacity < 1 + width + 1:
            self._relayout(drop=first, pad=0, slots=1 + (width - first) + 1)
        width = self._mask.shape[1]
        generator.module.copy_slot_runs(own, self._buffers,
                                        [(0, 1, row, 1 + width - length, length)])
        self._mask[row] = 0
        self._mask[row, width - length:] = 1
        return logits

    def _decode(self, finished: list[Request]) -> None:
        if self._capacity < 1 + self._mask.shape[1] + 1:
            first = self._first_read()
            self._relayout(drop=first, pad=0, slots=1 + self._mask.shape[1] - first + 1)
        active = torch.tensor([request is not None for request in self._running])
        self._mask = torch.cat([self._mask, active.long()[:, None]], dim=1)
        ids = torch.tensor(self._next, dtype=torch.long)[:, None]
        logits = self.generator._step(ids, self._mask, self._buffers)
        for row, request in enumerate(self._running):
            if request is not None:
                self._take(row, logits[row], finished)

    def _take(self, row: int, logits: torch.Tensor, finished: list[Request]) -> None:
        """The row's next token from its logits, and whether its request ends."""
        request = self._running[row]
        token = _choose(request, logits)
        request.tokens.append(token)
        if token in request.stop_tokens:
            request.finish_reason = "stop"
        elif len(request.tokens) >= request.max_new_tokens:
            request.finish_reason = "length"
        if request.done:
            self._running[row] = None
            self._mask[row] = 0
            self._next[row] = 0
            finished.append(request)
        else:
            self._next[row] = token

    # -- the cache's slots ---------------------------------------------------
    def _first_read(self) -> int:
        """The first column of the timeline a running row reads (its width: none)."""
        read = self._mask.any(dim=0).nonzero()
        return int(read[0]) if len(read) else self._mask.shape[1]

    def _release_unread_slots(self) -> None:
        """Move the rows left over the columns no running row reads, once those
        are at least half the timeline (a copy of the cache, amortized)."""
        first, width = self._first_read(), self._mask.shape[1]
        if first == width:
            self._mask = self._mask[:, width:]  # nothing runs: the timeline starts again
        elif first > 0 and 2 * first >= width:
            self._relayout(drop=first, pad=0, slots=1 + width - first + 1)

    def _relayout(self, drop: int, pad: int, slots: int) -> None:
        """New buffers of at least ``slots`` slots (and room to grow where the
        bound allows), the timeline's first ``drop`` columns (which no running
        row reads) dropped and ``pad`` empty ones put in front: every running
        row's columns copied over by the device."""
        width = self._mask.shape[1]
        kept = width - drop
        if slots < 1 + pad + kept + 1:
            raise AssertionError(f"{slots} slots for {pad + kept} columns and the next")
        capacity = slots + max(GROWTH_SLOTS, slots // 4)
        if self.max_slots is not None:
            if slots > self.max_slots:
                raise AssertionError(f"{slots} slots past the bound of {self.max_slots}")
            capacity = min(capacity, self.max_slots)
        larger = self.generator._empty_cache(self.rows, capacity)
        if self._buffers is not None and kept > 0:
            self.generator.module.copy_slot_runs(
                self._buffers, larger,
                [(row, 1 + drop, row, 1 + pad, kept) for row in range(self.rows)
                 if self._running[row] is not None])
        self._mask = torch.cat([torch.zeros(self.rows, pad, dtype=torch.long),
                                self._mask[:, drop:]], dim=1)
        self._buffers, self._capacity = larger, capacity


def _choose(request: Request, logits: torch.Tensor) -> int:
    """Greedy: the first largest logit (HF's argmax); sampling: a draw from the
    request's own generator after temperature, top-k and top-p."""
    logits = logits.float()
    if not request.do_sample:
        return int(torch.argmax(logits))
    scores = logits / request.temperature
    if request.top_k > 0:
        kth = torch.topk(scores, min(request.top_k, scores.numel())).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if request.top_p < 1:
        ordered, order = torch.sort(scores, descending=True)
        cumulative = torch.softmax(ordered, dim=-1).cumsum(-1)
        drop = cumulative - torch.softmax(ordered, dim=-1) >= request.top_p
        scores = scores.masked_fill(torch.zeros_like(drop).scatter(0, order, drop),
                                    float("-inf"))
    probabilities = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probabilities, 1, generator=request._random))

