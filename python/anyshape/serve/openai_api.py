"""OpenAI's API, as far as anyshape serves it: the requests' checks and the
responses' bodies, with no web framework (``app.py`` has the routes).

Every bad request raises ``RequestError``, which the server answers with its
status and OpenAI's error body: ``{"error": {"message", "type", "param",
"code"}}``, ``param`` naming the field. Fields OpenAI has and anyshape does
not compute (``logprobs``, ``echo``, penalties, ...) are refused by name
unless they hold the value that means "off", rather than ignored.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import uuid
from typing import Any


class RequestError(Exception):
    """A request the server refuses: ``status``, and the ``param`` it names."""

    def __init__(self, message: str, param: str | None, *, status: int = 400,
                 kind: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.status, self.kind, self.code = \
            message, param, status, kind, code

    def body(self) -> dict:
        return error_body(self.message, self.param, self.kind, self.code)


def error_body(message: str, param: str | None, kind: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def parse_body(raw: bytes) -> dict:
    """The request's JSON object."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RequestError(f"body: expected a JSON object, got malformed JSON ({error})",
                           "body") from None
    if not isinstance(body, dict):
        raise RequestError(f"body: expected a JSON object, got {type(body).__name__}", "body")
    return body


@dataclasses.dataclass
class ServedModel:
    """What the checks need to know of the model: its name (``model``), its
    vocabulary, its positions (None: no limit), and its tokenizer (None: token
    ids only)."""

    name: str
    vocab_size: int
    max_positions: int | None
    tokenizer: Any = None


@dataclasses.dataclass
class CompletionRequest:
    prompts: list  # lists of token ids, one per prompt
    max_tokens: int
    temperature: float
    top_p: float
    n: int
    stop: list  # strings
    seed: int | None
    stream: bool
    include_usage: bool


# Fields that change nothing at these values, and are refused at any other.
_OFF_VALUES = {"logprobs": (None, False, 0), "echo": (False,), "best_of": (None, 1),
               "presence_penalty": (None, 0, 0.0), "frequency_penalty": (None, 0, 0.0),
               "logit_bias": (None, {}), "suffix": (None,), "top_logprobs": (None, 0),
               "tools": (None, []), "tool_choice": (None, "none"), "response_format": (None,),
               "service_tier": (None, "auto", "default"), "parallel_tool_calls": (None,)}
_COMPLETION_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "n", "stop",
                      "seed", "stream", "stream_options", "user", "logprobs", "echo", "best_of",
                      "presence_penalty", "frequency_penalty", "logit_bias", "suffix"}
_CHAT_FIELDS = (_COMPLETION_FIELDS - {"prompt", "echo", "best_of", "suffix"}) | \
    {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
     "response_format", "service_tier", "parallel_tool_calls"}
_EMBEDDING_FIELDS = {"model", "input", "encoding_format", "user", "dimensions"}
_CLASSIFY_FIELDS = {"model", "input", "user"}
MAX_N = 16
# Choice i samples with seed + i, which torch's generators take below 2 ** 63.
MAX_SEED = 2 ** 63 - MAX_N
MAX_STOPS = 4


def _check_fields(body: dict, allowed: set) -> None:
    for field in sorted(body):
        if field not in allowed:
            raise RequestError(f"{field}: unrecognized request argument", field)
    for field, values in sorted(_OFF_VALUES.items()):
        given = body.get(field)
        if field in body and field in allowed and not any(
                given == value and type(given) is type(value) for value in values):
            raise RequestError(f"{field}: not supported by this server (expected one of "
                               f"{list(values)}), got {given!r}", field)


def _check_model(body: dict, model: ServedModel) -> None:
    name = body.get("model")
    if name is None:
        return
    if not isinstance(name, str):
        raise RequestError(f"model: expected a string, got {name!r}", "model")
    if name != model.name:
        raise RequestError(f"model: this server serves '{model.name}', got '{name}'", "model",
                           status=404, code="model_not_found")


def _integer(body: dict, field: str, default, low: int, high: int | None = None):
    value = body.get(field, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low or \
            (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"in [{low}, {high}]"
        raise RequestError(f"{field}: expected an integer {bounds}, got {value!r}", field)
    return value


def _number(body: dict, field: str, default: float, low: float, high: float,
            low_open: bool = False) -> float:
    value = body.get(field, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or value > high or value < low or \
            (low_open and value == low):
        bounds = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
        raise RequestError(f"{field}: expected a number in {bounds}, got {value!r}", field)
    return float(value)


def _token_ids(value, field: str, model: ServedModel) -> list:
    for token in value:
        if isinstance(token, bool) or not isinstance(token, int) or \
                not 0 <= token < model.vocab_size:
            raise RequestError(f"{field}: token id {token!r} is out of range [0, "
                               f"{model.vocab_size})", field)
    return list(value)


def _texts_or_ids(value, field: str, model: ServedModel) -> list:
    """A string, token ids, or a list of either: lists of token ids."""
    if isinstance(value, str) or (isinstance(value, list) and value and
                                  all(isinstance(v, int) and not isinstance(v, bool)
                                      for v in value)):
        value = [value]
    if not isinstance(value, list) or not value:
        raise RequestError(f"{field}: expected a string, token ids, or a non-empty list of "
                           f"either, got {value!r}"[:300], field)
    prompts = []
    for item in value:
        if isinstance(item, str):
            if model.tokenizer is None:
                raise RequestError(f"{field}: text needs the server's tokenizer (anyshape-serve "
                                   f"--tokenizer DIR); send token ids instead", field)
            # A tokenizer may know more ids than the model's table.
            ids = _token_ids(model.tokenizer(item, add_special_tokens=True)["input_ids"], field,
                             model)
        elif isinstance(item, list):
            ids = _token_ids(item, field, model)
        else:
            raise RequestError(f"{field}: expected strings or lists of token ids, got "
                               f"{type(item).__name__}", field)
        if not ids:
            raise RequestError(f"{field}: an empty prompt (no tokens)", field)
        prompts.append(ids)
    return prompts


def completion_request(body: dict, model: ServedModel, *, chat: bool = False) -> CompletionRequest:
    """``/v1/completions`` (``chat``: ``/v1/chat/completions``) checked."""
    _check_fields(body, _CHAT_FIELDS if chat else _COMPLETION_FIELDS)
    _check_model(body, model)
    if chat:
        prompts = [_chat_prompt(body.get("messages"), model)]
    else:
        if "prompt" not in body:
            raise RequestError("prompt: required", "prompt")
        prompts = _texts_or_ids(body["prompt"], "prompt", model)
    limit = model.max_positions
    length_field = "max_tokens"
    if chat and body.get("max_completion_tokens") is not None:
        length_field = "max_completion_tokens"
    max_tokens = _integer(body, length_field, None, 1)
    for prompt in prompts:
        if limit is not None and len(prompt) >= limit:
            raise RequestError(f"{'messages' if chat else 'prompt'}: {len(prompt)} tokens, "
                               f"past the model's {limit} positions (it needs one for a new "
                               f"token)", "messages" if chat else "prompt")
    if max_tokens is None:  # OpenAI's default: 16 for completions, what fits for chat
        longest = max(len(prompt) for prompt in prompts)
        max_tokens = 16 if not chat else (limit - longest if limit is not None else 4096)
        if limit is not None:
            max_tokens = min(max_tokens, limit - longest)
    for prompt in prompts:
        if limit is not None and len(prompt) + max_tokens > limit:
            raise RequestError(f"{length_field}: the prompt's {len(prompt)} tokens and "
                               f"{max_tokens} new ones exceed the model's {limit} positions",
                               length_field)
    stop = body.get("stop")
    stops = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or len(stops) > MAX_STOPS or \
            not all(isinstance(s, str) and s for s in stops):
        raise RequestError(f"stop: expected a non-empty string or a list of up to {MAX_STOPS}, "
                           f"got {stop!r}", "stop")
    if stops and model.tokenizer is None:
        raise RequestError("stop: stop strings need the server's tokenizer (anyshape-serve "
                           "--tokenizer DIR)", "stop")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise RequestError(f"stream: expected a boolean, got {stream!r}", "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise RequestError("stream_options: only with stream: true", "stream_options")
        if not isinstance(options, dict) or set(options) - {"include_usage"} or \
                not isinstance(options.get("include_usage", False), bool):
            raise RequestError(f"stream_options: expected {{'include_usage': bool}}, got "
                               f"{options!r}", "stream_options")
        include_usage = options.get("include_usage", False)
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise RequestError(f"user: expected a string, got {user!r}", "user")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or
                             not 0 <= seed < MAX_SEED):
        raise RequestError(f"seed: expected an integer in [0, {MAX_SEED}), got {seed!r}", "seed")
    return CompletionRequest(prompts, max_tokens, _number(body, "temperature", 1.0, 0.0, 2.0),
                             _number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
                             _integer(body, "n", 1, 1, MAX_N), stops, seed, stream,
                             include_usage)


def _chat_prompt(messages, model: ServedModel) -> list:
    tokenizer = model.tokenizer
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise RequestError("messages: this server's tokenizer has no chat template; use "
                           "/v1/completions", "messages", status=404)
    if not isinstance(messages, list) or not messages:
        raise RequestError(f"messages: expected a non-empty list of messages, got "
                           f"{messages!r}"[:300], "messages")
    for at, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) or \
                message["role"] not in ("system", "user", "assistant", "developer") or \
                not isinstance(message.get("content"), str):
            raise RequestError(f"messages[{at}]: expected {{'role': 'system'|'user'|"
                               f"'assistant', 'content': str}}, got {message!r}"[:300],
                               f"messages[{at}]")
    turns = [{"role": m["role"], "content": m["content"]} for m in messages]
    ids = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)


@dataclasses.dataclass
class EncodeRequest:
    inputs: list  # lists of token ids
    base64: bool


def encode_request(body: dict, model: ServedModel, *, embeddings: bool) -> EncodeRequest:
    """``/v1/embeddings`` (``embeddings``) or ``/v1/classify`` checked."""
    _check_fields(body, _EMBEDDING_FIELDS if embeddings else _CLASSIFY_FIELDS)
    _check_model(body, model)
    if "input" not in body:
        raise RequestError("input: required", "input")
    inputs = _texts_or_ids(body["input"], "input", model)
    if model.max_positions is not None:
        for at, ids in enumerate(inputs):
            if len(ids) > model.max_positions:
                raise RequestError(f"input: input {at} has {len(ids)} tokens, past the model's "
                                   f"{model.max_positions} positions", "input")
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise RequestError(f"encoding_format: expected 'float' or 'base64', got {fmt!r}",
                           "encoding_format")
    if body.get("dimensions") is not None:
        raise RequestError("dimensions: not supported by this server (the model's own size "
                           "only)", "dimensions")
    return EncodeRequest(inputs, fmt == "base64")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_body(request_id: str, model: str, choices: list, usage_counts: dict, *,
                    chat: bool, created: int | None = None) -> dict:
    """The whole answer: ``choices`` as (index, text, token ids, finish reason)."""
    created = int(time.time()) if created is None else created
    if chat:
        return {"id": request_id, "object": "chat.completion", "created": created,
                "model": model, "usage": usage_counts,
                "choices": [{"index": index, "finish_reason": reason, "logprobs": None,
                             "message": {"role": "assistant", "content": text},
                             "token_ids": ids} for index, text, ids, reason in choices]}
    return {"id": request_id, "object": "text_completion", "created": created, "model": model,
            "usage": usage_counts,
            "choices": [{"index": index, "text": text, "finish_reason": reason, "logprobs": None,
                         "token_ids": ids} for index, text, ids, reason in choices]}


def completion_chunk(request_id: str, model: str, index: int, text: str, ids: list,
                     reason: str | None, *, chat: bool, created: int, first: bool) -> dict:
    """One server-sent event's body of a streamed answer."""
    if chat:
        delta = {"content": text}
        if first:
            delta["role"] = "assistant"
        return {"id": request_id, "object": "chat.completion.chunk", "created": created,
                "model": model, "choices": [{"index": index, "delta": delta, "token_ids": ids,
                                             "finish_reason": reason, "logprobs": None}]}
    return {"id": request_id, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": index, "text": text, "token_ids": ids, "finish_reason": reason,
                         "logprobs": None}]}


def usage_chunk(request_id: str, model: str, usage_counts: dict, *, chat: bool,
                created: int) -> dict:
    return {"id": request_id, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created, "model": model, "choices": [], "usage": usage_counts}


def server_sent_event(data: dict | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()
