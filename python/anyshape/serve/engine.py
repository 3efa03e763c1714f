"""The engines a server runs a compiled model with: one thread per model that
batches what concurrent callers ask of it.

- ``GenerationEngine``: a causal LM's requests through ``Scheduler``
  (continuous batching). Each request's new tokens reach its caller after
  every step, through a callback; a caller that goes away cancels its
  request, which frees its row and its cache at the next step.
- ``EncoderEngine``: an encoder's inputs (embeddings, classification) from
  concurrent requests, run as one padded batch (which a module compiled with
  ``padding="eliminate"`` computes at the cost of its real tokens).

Both bound their queues: past ``max_waiting`` a submission raises
``Overloaded``, which a server answers with 429 and ``Retry-After``. Only the
engine's thread calls into the model; callers only queue.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable

import torch

from anyshape.runtime.scheduler import Request, Scheduler

logger = logging.getLogger(__name__)


class Overloaded(Exception):
    """The engine's queue is full: try again after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int = 1):
        super().__init__(message)
        self.retry_after = retry_after


# A stream's callback: (new token ids, finish reason or None, error or None).
TokenCallback = Callable[[list, "str | None", "Exception | None"], None]


@dataclasses.dataclass(eq=False)
class TokenStream:
    """One request's place in a ``GenerationEngine``: ``callback`` gets its new
    tokens after every step, then once its finish reason ("stop", "length",
    "cancelled") or the error that ended it."""

    request: Request
    callback: TokenCallback
    sent: int = 0


class _EngineThread:
    """An engine's thread, and the lock and condition its callers wake it with."""

    def __init__(self, name: str):
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._closed = False
        self._thread = threading.Thread(target=self._guarded, name=name, daemon=True)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _guarded(self) -> None:
        """``_run``, and if it ever fails, every caller waiting hears of it and
        later submissions are refused, rather than left waiting."""
        try:
            self._run()
        except BaseException as error:
            logger.exception("the engine's thread failed; its callers get the error")
            with self._lock:
                self._closed = True
            self._fail_pending(error)
            raise

    def _fail_pending(self, error: BaseException) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop the thread; what is queued or running gets an error."""
        with self._lock:
            self._closed = True
            self._work.notify()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        raise NotImplementedError


class GenerationEngine(_EngineThread):
    """Continuous batching of a compiled causal LM (``Generator``) on a thread
    of its own; ``rows`` and ``cache_bytes`` as ``Scheduler``'s; at most
    ``max_waiting`` requests wait for a row."""

    def __init__(self, generator, *, rows: int | None = None, cache_bytes: int | None = None,
                 max_waiting: int = 64):
        if isinstance(max_waiting, bool) or not isinstance(max_waiting, int) or max_waiting < 1:
            raise ValueError(f"max_waiting: expected a positive int, got {max_waiting!r}")
        self.generator = generator
        self.scheduler = Scheduler(generator, rows=rows, cache_bytes=cache_bytes)
        self.max_waiting = max_waiting
        super().__init__("anyshape-generation")
        self._joining: list[TokenStream] = []
        self._leaving: list[TokenStream] = []
        self._streams: list[TokenStream] = []  # the engine thread's own
        self._thread.start()

    @property
    def rows(self) -> int:
        return self.scheduler.rows

    @property
    def running(self) -> int:
        """Requests in a row."""
        return self.scheduler.running

    @property
    def waiting(self) -> int:
        """Requests not yet in a row."""
        return len(self._joining) + self.scheduler.waiting

    def submit(self, prompt: list[int], callback: TokenCallback, **options) -> TokenStream:
        """Queue ``prompt`` (token ids) with ``Scheduler.submit``'s ``options``;
        its ValueError or TypeError for a bad request comes here, at once.
        Raises ``Overloaded`` where ``max_waiting`` requests wait already."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the engine is closed")
            waiting = self.waiting
            if waiting >= self.max_waiting:
                raise Overloaded(f"{waiting} requests wait for one of {self.rows} rows "
                                 f"(max_waiting {self.max_waiting})")
            # Only checked here: the engine's thread queues it (Scheduler.enqueue).
            request = self.scheduler.checked_request(torch.tensor(prompt, dtype=torch.long),
                                                     **options)
            stream = TokenStream(request, callback)
            self._joining.append(stream)
            self._work.notify()
        return stream

    def cancel(self, stream: TokenStream) -> None:
        """End ``stream``'s request at the next step (a caller that went away)."""
        with self._lock:
            self._leaving.append(stream)
            self._work.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not (self._closed or self._joining or self._leaving or self._streams):
                    self._work.wait()
                if self._closed:
                    for stream in self._joining + self._streams:
                        _tell(stream.callback, [], None,
                              RuntimeError("the server is shutting down"))
                    return
                joining, self._joining = self._joining, []
                leaving, self._leaving = self._leaving, []
                self._streams += joining  # from here on a failure tells them
            try:
                self._step(joining, leaving)
            except Exception as error:  # noqa: BLE001 - every caller hears of it
                logger.exception("a generation step failed; its requests get the error")
                self._fail_all(error)

    def _step(self, joining: list, leaving: list) -> None:
        for stream in joining:
            self.scheduler.enqueue(stream.request)
        for stream in leaving:
            if not stream.request.done and any(s is stream for s in self._streams):
                self.scheduler.cancel(stream.request)
        if self.scheduler.waiting or self.scheduler.running:
            self.scheduler.step()
        kept = []
        for stream in self._streams:
            request = stream.request
            new = request.tokens[stream.sent:]
            stream.sent += len(new)
            if new or request.done:
                _tell(stream.callback, new, request.finish_reason, None)
            if not request.done:
                kept.append(stream)
        self._streams = kept

    def _fail_pending(self, error: BaseException) -> None:
        with self._lock:
            pending, self._joining = self._joining + self._streams, []
        self._streams = []
        for stream in pending:
            _tell(stream.callback, [], None, error)

    def _fail_all(self, error: Exception) -> None:
        """A step failed: every request in it gets the error, and the batch
        starts again empty (its cache's state is unknown)."""
        for stream in self._streams:
            _tell(stream.callback, [], None, error)
        self._streams = []
        self.scheduler = Scheduler(self.generator, rows=self.scheduler.rows,
                                   cache_bytes=self.scheduler.cache_bytes)


@dataclasses.dataclass(eq=False)
class _EncoderJob:
    inputs: list  # lists of token ids
    callback: Callable[[Any, "Exception | None"], None]


class EncoderEngine(_EngineThread):
    """An encoder's inputs from concurrent requests, run together: ``run(ids,
    mask)`` (a padded batch, [rows, length] each) returns one row of results
    per input. A batch takes up to ``max_batch`` inputs; it starts once the
    queue is empty or full, after at most ``wait_s`` for more to come."""

    def __init__(self, run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], *,
                 max_batch: int = 32, max_waiting: int = 256, wait_s: float = 0.002,
                 pad_token_id: int = 0):
        for name, value in (("max_batch", max_batch), ("max_waiting", max_waiting)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")
        self._run_batch, self.max_batch, self.max_waiting = run, max_batch, max_waiting
        self.wait_s, self.pad_token_id = wait_s, pad_token_id
        super().__init__("anyshape-encoder")
        self._queue: list[_EncoderJob] = []
        self._taken: list[_EncoderJob] = []  # the batch running
        self._thread.start()

    @property
    def waiting(self) -> int:
        """Inputs queued for a batch."""
        return sum(len(job.inputs) for job in self._queue)

    def submit(self, inputs: list, callback: Callable[[Any, "Exception | None"], None]) -> None:
        """Queue ``inputs`` (lists of token ids): ``callback`` gets their rows
        of results, [len(inputs), ...], or the error."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the engine is closed")
            waiting = sum(len(job.inputs) for job in self._queue)
            if waiting + len(inputs) > self.max_waiting:
                raise Overloaded(f"{waiting} inputs wait already (max_waiting "
                                 f"{self.max_waiting})")
            self._queue.append(_EncoderJob(list(inputs), callback))
            self._work.notify()

    def _fail_pending(self, error: BaseException) -> None:
        with self._lock:
            pending, self._queue = self._taken + self._queue, []
        for job in pending:
            _tell(job.callback, None, error)

    def _take(self) -> list[_EncoderJob] | None:
        with self._lock:
            while not (self._closed or self._queue):
                self._work.wait()
            if self._closed:
                for job in self._queue:
                    _tell(job.callback, None, RuntimeError("the server is shutting down"))
                return None
            deadline = time.monotonic() + self.wait_s
            while sum(len(job.inputs) for job in self._queue) < self.max_batch:
                left = deadline - time.monotonic()
                if left <= 0 or not self._work.wait(timeout=left):
                    break
            jobs, rows = [], 0
            while self._queue and (not jobs or rows + len(self._queue[0].inputs) <= self.max_batch):
                job = self._queue.pop(0)
                jobs.append(job)
                rows += len(job.inputs)
            self._taken = jobs
            return jobs

    def _run(self) -> None:
        while (jobs := self._take()) is not None:
            inputs = [row for job in jobs for row in job.inputs]
            try:
                results = [None] * len(inputs)
                for group in length_groups([len(row) for row in inputs], PADDING_AT_MOST):
                    rows = self._run_batch(*self._padded([inputs[at] for at in group]))
                    for at, row in zip(group, rows):
                        results[at] = row
                results = torch.stack([torch.as_tensor(row) for row in results])
            except Exception as error:  # noqa: BLE001 - every caller hears of it
                for job in jobs:
                    _tell(job.callback, None, error)
                self._taken = []
                continue
            start = 0
            for job in jobs:
                _tell(job.callback, results[start:start + len(job.inputs)], None)
                start += len(job.inputs)
            self._taken = []

    def _padded(self, inputs: list) -> tuple[torch.Tensor, torch.Tensor]:
        length = max(len(row) for row in inputs)
        ids = torch.full((len(inputs), length), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros(len(inputs), length, dtype=torch.long)
        for at, row in enumerate(inputs):
            ids[at, :len(row)] = torch.tensor(row, dtype=torch.long)
            mask[at, :len(row)] = 1
        return ids, mask


# A batch's padded positions at most this fraction of its real tokens. With
# padding eliminated the products skip padding, but not every op does (the
# attention's scores are [rows, length, length]), so a long input beside
# short ones still costs them its length (docs/serving.md, "Batching").
PADDING_AT_MOST = 0.5


def length_groups(lengths: list[int], padding_at_most: float) -> list[list[int]]:
    """The inputs' indices grouped by length, shortest first: a group grows
    while its rows padded to its longest hold at most ``padding_at_most``
    times its real tokens in padding."""
    groups, group, tokens = [], [], 0
    for at in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
        padded = (len(group) + 1) * lengths[at]
        if group and padded - (tokens + lengths[at]) > padding_at_most * (tokens + lengths[at]):
            groups.append(group)
            group, tokens = [], 0
        group.append(at)
        tokens += lengths[at]
    return groups + ([group] if group else [])


def _tell(callback: Callable, *event) -> None:
    """Give a caller its event. A caller that has gone (its event loop
    closed) cannot stop the engine's thread, which serves the others."""
    try:
        callback(*event)
    except Exception as error:  # noqa: BLE001 - one caller's failure, logged
        logger.warning("a caller's callback failed, its event dropped: %r", error)
