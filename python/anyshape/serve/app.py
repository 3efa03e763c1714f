"""``ModelServer``: one compiled artifact behind OpenAI's HTTP API.

A generator (``compile_generator``) serves ``/v1/completions``, and
``/v1/chat/completions`` where its tokenizer has a chat template; an encoder
(``compile``) whose output is a [batch, dim] tensor serves
``/v1/embeddings``, and one whose output has ``logits`` serves
``/v1/classify``. ``GET /v1/models`` and ``GET /health`` answer for both.

The server is an async callable from a Starlette ``Request`` to a Starlette
``Response``, which is what a Ray Serve deployment's ``__call__`` is
(``ray_app.py``); its engines (``engine.py``) batch the requests of every
caller. A client that disconnects cancels its request, freeing its row.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hmac
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from anyshape.runtime.compiled_module import load
from anyshape.runtime.generator import Generator
from anyshape.serve.engine import EncoderEngine, GenerationEngine, Overloaded
from anyshape.serve.openai_api import (RequestError, ServedModel, completion_body,
                                       completion_chunk, completion_request, encode_request,
                                       error_body, new_id, parse_body, server_sent_event, usage,
                                       usage_chunk)

TASKS = ("generate", "embeddings", "classify")
logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ServerOptions:
    """``anyshape-serve``'s options for one replica."""

    tokenizer: str | None = None   # a HF tokenizer directory
    name: str | None = None        # the ``model`` clients name (default: the artifact's folder)
    task: str | None = None        # None: what the artifact is
    api_key: str | None = None     # checked as ``Authorization: Bearer KEY`` where set
    rows: int | None = None        # a generator's batch rows (Scheduler's)
    cache_bytes: int | None = None
    max_waiting: int = 64          # requests (generators) waiting for a row
    max_batch: int = 32            # inputs in an encoder's batch
    threads: int | None = None


class ModelServer:
    """One artifact, loaded, with the engine its task needs."""

    def __init__(self, artifact: str | Path, options: ServerOptions | None = None):
        options = options or ServerOptions()
        self.options = options
        path = Path(artifact)
        loaded = load(path, threads=options.threads)
        tokenizer = None
        if options.tokenizer is not None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(options.tokenizer)
        name = options.name or path.resolve().name
        self.created = int(time.time())
        if isinstance(loaded, Generator):
            if options.task not in (None, "generate"):
                raise ValueError(f"task: {path} is a generator, which serves 'generate', got "
                                 f"{options.task!r}")
            self.task = "generate"
            self.model = ServedModel(name, loaded.vocab_size, loaded.max_positions, tokenizer)
            self.generation = GenerationEngine(loaded, rows=options.rows,
                                               cache_bytes=options.cache_bytes,
                                               max_waiting=options.max_waiting)
            self.encoder = None
        else:
            self.task, limit = _encoder_task(loaded, options.task)
            vocab = _table_rows(loaded) or (len(tokenizer) if tokenizer is not None else None)
            self.model = ServedModel(name, vocab if vocab is not None else 2 ** 62, limit,
                                     tokenizer)
            pad = getattr(tokenizer, "pad_token_id", None) or 0
            self.generation = None
            self.labels = _labels(options.tokenizer)
            self.encoder = EncoderEngine(_batch_runner(loaded, self.task),
                                         max_batch=options.max_batch,
                                         max_waiting=max(options.max_waiting * options.max_batch,
                                                         options.max_batch),
                                         pad_token_id=pad)
        self._add_routes()

    @classmethod
    def around(cls, engine, model: ServedModel, options: ServerOptions | None = None):
        """A server of completions whose requests ``engine`` runs: anything with
        ``GenerationEngine``'s ``submit``, ``cancel``, ``close``, ``running``
        and ``waiting`` (``bench/serve.py``'s static batches, HF eager's)."""
        server = cls.__new__(cls)
        server.options = options or ServerOptions()
        server.created = int(time.time())
        server.task, server.model, server.generation, server.encoder = \
            "generate", model, engine, None
        server._add_routes()
        return server

    def _add_routes(self) -> None:
        self._routes = {"/v1/models": ("GET", self._models), "/health": ("GET", self._health)}
        if self.task == "generate":
            self._routes["/v1/completions"] = ("POST", self._completions)
            self._routes["/v1/chat/completions"] = ("POST", self._chat_completions)
        else:
            self._routes[{"embeddings": "/v1/embeddings",
                          "classify": "/v1/classify"}[self.task]] = ("POST", self._encode)

    def close(self) -> None:
        for engine in (self.generation, self.encoder):
            if engine is not None:
                engine.close()

    # -- HTTP ----------------------------------------------------------------
    async def __call__(self, request):
        response = await self._answer(request)
        # Which replica answered: for operators' logs, and the tests of a replica's failure.
        response.headers["x-anyshape-replica"] = str(os.getpid())
        return response

    async def _answer(self, request):
        from starlette.responses import JSONResponse

        try:
            self._check_key(request)
            path = request.url.path.rstrip("/") or "/"
            if path not in self._routes:
                raise RequestError(f"{path}: no such route (this server has "
                                   f"{', '.join(sorted(self._routes))})", None, status=404)
            method, handler = self._routes[path]
            if request.method != method:
                raise RequestError(f"{path}: takes {method}, got {request.method}", None,
                                   status=405)
            if method == "GET":
                return JSONResponse(handler())
            return await handler(parse_body(await request.body()), request)
        except RequestError as error:
            return JSONResponse(error.body(), status_code=error.status)
        except Overloaded as error:
            return JSONResponse(error_body(f"the server is busy: {error}", None,
                                           "server_overloaded", "overloaded"), status_code=429,
                                headers={"Retry-After": str(error.retry_after)})
        except Exception as error:  # noqa: BLE001 - a 500 that says what failed, logged
            logger.exception("request to %s failed", request.url.path)
            return JSONResponse(error_body(f"the server failed: {error!r}", None,
                                           "server_error"), status_code=500)

    def _check_key(self, request) -> None:
        key = self.options.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
            raise RequestError("Authorization: expected 'Bearer' and this server's API key",
                               "Authorization", status=401, code="invalid_api_key")

    def _models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model.name, "object": "model",
                                            "created": self.created, "owned_by": "anyshape"}]}

    def _health(self) -> dict:
        """This replica's state: its process, and its requests running and waiting."""
        state = {"status": "ok", "task": self.task, "replica": os.getpid()}
        if self.generation is not None:
            state.update(running=self.generation.running, waiting=self.generation.waiting)
        else:
            state.update(running=0, waiting=self.encoder.waiting)
        return state

    # -- generation ----------------------------------------------------------
    async def _chat_completions(self, body: dict, request):
        return await self._completions(body, request, chat=True)

    async def _completions(self, body: dict, request, chat: bool = False):
        from starlette.responses import JSONResponse, StreamingResponse

        asked = completion_request(body, self.model, chat=chat)
        run = _Completion(self, asked, chat)
        run.submit()
        if asked.stream:
            return StreamingResponse(run.events(), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        try:
            await run.finish()
        finally:
            run.cancel_unfinished()
        if run.error is not None:
            return JSONResponse(error_body(f"generation failed: {run.error}", None,
                                           "server_error"), status_code=500)
        return JSONResponse(run.body())

    # -- encoders ------------------------------------------------------------
    async def _encode(self, body: dict, request):
        from starlette.responses import JSONResponse

        asked = encode_request(body, self.model, embeddings=self.task == "embeddings")
        if len(asked.inputs) > self.encoder.max_waiting:
            raise RequestError(f"input: {len(asked.inputs)} inputs, more than this server "
                               f"queues ({self.encoder.max_waiting})", "input")
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def deliver(result, error):
            loop.call_soon_threadsafe(_settle, done, result, error)

        self.encoder.submit(asked.inputs, deliver)
        try:
            rows = await done
        except Exception as error:  # noqa: BLE001 - the model's failure, said as such
            return JSONResponse(error_body(f"the model failed: {error}", None, "server_error"),
                                status_code=500)
        rows = rows.float().numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)
        tokens = sum(len(ids) for ids in asked.inputs)
        counts = {"prompt_tokens": tokens, "total_tokens": tokens}
        if self.task == "embeddings":
            data = [{"object": "embedding", "index": at,
                     "embedding": base64.b64encode(row.astype("<f4").tobytes()).decode()
                     if asked.base64 else row.tolist()} for at, row in enumerate(rows)]
        else:
            data = []
            for at, row in enumerate(rows):
                probabilities = torch.softmax(torch.from_numpy(row).double(), dim=-1)
                best = int(torch.argmax(probabilities))
                data.append({"object": "classification", "index": at,
                             "label": self.labels.get(best, f"LABEL_{best}"),
                             "probs": probabilities.tolist(), "logits": row.tolist()})
        return JSONResponse({"object": "list", "data": data, "model": self.model.name,
                             "usage": counts})


def _settle(future, result, error) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


@dataclasses.dataclass
class _Choice:
    index: int
    prompt_tokens: int
    ids: list = dataclasses.field(default_factory=list)
    text: str = ""      # the text so far, stop strings cut
    sent: int = 0       # characters of text streamed
    sent_ids: int = 0   # tokens streamed
    finish_reason: str | None = None
    stream: Any = None  # the engine's TokenStream


class _Completion:
    """One completion request's choices (``n`` a prompt), run in the engine."""

    def __init__(self, server: ModelServer, asked, chat: bool):
        self.server, self.asked, self.chat = server, asked, chat
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())
        self.loop = asyncio.get_running_loop()
        self.events_queue: asyncio.Queue = asyncio.Queue()
        self.choices: list[_Choice] = []
        self.error: Exception | None = None
        self.longest_stop = max((len(stop) for stop in asked.stop), default=0)

    def submit(self) -> None:
        asked, engine = self.asked, self.server.generation
        sample = asked.temperature > 0
        most = getattr(engine, "max_waiting", None)
        if most is not None and len(asked.prompts) * asked.n > most:
            raise RequestError(f"n: {len(asked.prompts)} prompts of {asked.n} choices are "
                               f"{len(asked.prompts) * asked.n} requests, more than this server "
                               f"queues ({most})", "n")
        try:
            for prompt in asked.prompts:
                for _ in range(asked.n):
                    choice = _Choice(len(self.choices), len(prompt))
                    options = {"max_new_tokens": asked.max_tokens, "do_sample": sample}
                    if sample:
                        options.update(temperature=asked.temperature, top_p=asked.top_p,
                                       seed=None if asked.seed is None else asked.seed + choice.index)
                    callback = self._callback(choice.index)
                    choice.stream = engine.submit(prompt, callback, **options)
                    self.choices.append(choice)
        except (ValueError, TypeError) as error:
            # The scheduler's own checks (a cache bound), in its argument names.
            self.cancel_unfinished()
            message = str(error).replace("max_new_tokens", "max_tokens")
            field = message.split(":")[0].replace("input_ids", "prompt")
            if field not in ("max_tokens", "prompt", "temperature", "top_p", "seed"):
                raise
            raise RequestError(message, field) from None
        except BaseException:
            self.cancel_unfinished()
            raise

    def _callback(self, index: int):
        def deliver(tokens, reason, error):
            self.loop.call_soon_threadsafe(self.events_queue.put_nowait,
                                           (index, list(tokens), reason, error))
        return deliver

    def cancel_unfinished(self) -> None:
        for choice in self.choices:
            if choice.finish_reason is None and choice.stream is not None:
                self.server.generation.cancel(choice.stream)

    def _unfinished(self) -> bool:
        return self.error is None and any(c.finish_reason is None for c in self.choices)

    def _take(self, index: int, tokens: list, reason, error) -> bool:
        """Whether the event changed the choice (or failed the request)."""
        choice = self.choices[index]
        if error is not None:
            self.error = error
            return True
        if choice.finish_reason is not None:
            return False  # cut by a stop string already: the engine's last events
        choice.ids += tokens
        tokenizer = self.server.model.tokenizer
        if tokenizer is not None:
            text = tokenizer.decode(choice.ids, skip_special_tokens=True)
            for stop in self.asked.stop:
                at = text.find(stop, max(0, choice.sent - len(stop)))
                if at >= 0:
                    text, reason = text[:at], "stop_string"
            choice.text = text
        if reason is not None:
            if reason == "stop_string":
                self.server.generation.cancel(choice.stream)
            choice.finish_reason = "length" if reason == "length" else "stop"
        return True

    async def finish(self) -> None:
        while self._unfinished():
            self._take(*await self.events_queue.get())

    def body(self) -> dict:
        counts = self._usage()
        choices = [(c.index, c.text, c.ids, c.finish_reason) for c in self.choices]
        return completion_body(self.id, self.server.model.name, choices, counts, chat=self.chat,
                               created=self.created)

    def _usage(self) -> dict:
        return usage(sum(c.prompt_tokens for c in self.choices[::self.asked.n]),
                     sum(len(c.ids) for c in self.choices))

    async def events(self):
        """The answer as server-sent events: a chunk a choice's new text, its
        finish reason, the usage where asked, then ``[DONE]``. A client that
        goes away cancels what has not finished."""
        name = self.server.model.name
        try:
            while self._unfinished():
                index, tokens, reason, error = await self.events_queue.get()
                if not self._take(index, tokens, reason, error):
                    continue
                if self.error is not None:
                    yield server_sent_event(error_body(f"generation failed: {self.error}", None,
                                                       "server_error"))
                    break
                choice = self.choices[index]
                # Text that may begin a stop string waits for the next tokens, or the end.
                hold = 0 if choice.finish_reason else max(0, self.longest_stop - 1)
                if choice.text.endswith("\ufffd") and not choice.finish_reason:
                    hold = max(hold, 1)  # a character whose bytes have not all come
                end = max(choice.sent, len(choice.text) - hold)
                text, new_ids = choice.text[choice.sent:end], choice.ids[choice.sent_ids:]
                if text or new_ids or choice.finish_reason:
                    yield server_sent_event(completion_chunk(
                        self.id, name, index, text, new_ids, choice.finish_reason,
                        chat=self.chat, created=self.created, first=choice.sent_ids == 0))
                choice.sent, choice.sent_ids = end, len(choice.ids)
            else:
                if self.asked.include_usage:
                    yield server_sent_event(usage_chunk(self.id, name, self._usage(),
                                                        chat=self.chat, created=self.created))
                yield server_sent_event("[DONE]")
        finally:
            self.cancel_unfinished()


def _encoder_task(module, task: str | None) -> tuple[str, int | None]:
    """What an encoder artifact serves (its output: a [batch, dim] tensor is
    embeddings, ``logits`` a classifier's), and its longest input."""
    names = [spec.name for spec in module.signature.inputs]
    if len(names) != 2:
        raise ValueError(f"artifact: an encoder served over HTTP takes (input_ids, "
                         f"attention_mask), got inputs {names}")
    tree = module.signature.output_tree
    outputs = module.signature.outputs
    if tree.get("kind") == "leaf" and len(outputs) == 1 and len(outputs[0].dims) == 2:
        found = "embeddings"
    elif tree.get("kind") == "class" and "logits" in tree.get("keys", []):
        found = "classify"
    else:
        found = None
    if task is not None and task not in TASKS:
        raise ValueError(f"task: expected one of {list(TASKS)}, got {task!r}")
    if found is None or (task is not None and task != found):
        shapes = ", ".join(spec.describe() for spec in outputs)
        raise ValueError(f"task: this artifact returns {shapes}; embeddings need one "
                         f"[batch, dim] tensor, classify an output with logits"
                         + (f" (asked for {task!r})" if task else ""))
    limit = None
    seq = module.signature.inputs[0].dims[1] if len(module.signature.inputs[0].dims) == 2 else None
    symbol = module.signature.symbols.get(seq) if isinstance(seq, str) else None
    if symbol is not None and symbol.max is not None:
        limit = symbol.max
    elif isinstance(seq, int):
        limit = seq
    return found, limit


def _table_rows(module) -> int | None:
    """The token table's rows, from the runtime's index bounds of input_ids."""
    names = [spec.name for spec in module.signature.inputs]
    rows = [bound.rows for bound in module.signature.index_bounds
            if bound.input == names[0] and bound.low == 0]
    return min(rows) if rows else None


def _labels(tokenizer_dir: str | None) -> dict:
    """A classifier's label names from the config beside its tokenizer, if any."""
    if tokenizer_dir is None or not (Path(tokenizer_dir) / "config.json").is_file():
        return {}
    import json

    config = json.loads((Path(tokenizer_dir) / "config.json").read_text())
    return {int(k): v for k, v in config.get("id2label", {}).items()}


def _batch_runner(module, task: str):
    names = [spec.name for spec in module.signature.inputs]

    def run(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = module(**{names[0]: ids, names[1]: mask})
        return out if task == "embeddings" else out.logits
    return run
