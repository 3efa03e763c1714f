"""``ModelServer`` in this process (no Ray, no sockets): what a replica does
with each request, against ``generate`` alone on the same artifact."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from serving import char_tokenizer, small_gpt2

import anyshape
from anyshape.serve.app import ModelServer, ServerOptions

pytestmark = pytest.mark.builds_after_export


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    directory = tmp_path_factory.mktemp("serve")
    anyshape.compile_generator(small_gpt2()).save(directory / "tiny")
    char_tokenizer(directory / "tokenizer")
    return directory


def _server(artifact, **options) -> ModelServer:
    return ModelServer(artifact / "tiny", ServerOptions(tokenizer=str(artifact / "tokenizer"),
                                                        **options))


def _request(method: str, path: str, body=None, headers=None, raw=None):
    from starlette.requests import Request

    data = raw if raw is not None else b"" if body is None else json.dumps(body).encode()
    scope = {"type": "http", "method": method, "path": path, "query_string": b"",
             "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
             "server": ("127.0.0.1", 8000), "scheme": "http", "root_path": ""}

    async def receive():
        return {"type": "http.request", "body": data, "more_body": False}
    return Request(scope, receive)


async def _call(server, method, path, body=None, **kwargs):
    """(status, JSON body, headers) of a whole answer; a stream's events as a list."""
    response = await server(_request(method, path, body, **kwargs))
    if hasattr(response, "body_iterator"):
        events = []
        async for chunk in response.body_iterator:
            text = chunk.decode() if isinstance(chunk, bytes) else chunk
            for line in text.split("\n"):
                if line.startswith("data: "):
                    payload = line[len("data: "):]
                    events.append(payload if payload == "[DONE]" else json.loads(payload))
        return response.status_code, events, response.headers
    return response.status_code, json.loads(response.body), response.headers


def _alone(generator, prompt: list, new: int) -> list:
    out = generator.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False,
                             pad_token_id=0)[0, len(prompt):].tolist()
    eos = generator.generation_config.eos_token_id
    return out[:out.index(eos) + 1] if eos in out else out


def test_concurrent_requests_get_their_tokens_alone(artifact):
    """/// 12 requests at once, mixed prompt lengths and n: each choice's tokens
    are generate's for its prompt alone, streamed or not."""
    server = _server(artifact)
    alone_generator = anyshape.load(artifact / "tiny")
    prompts = [[(7 * i + j) % 250 + 3 for j in range(length)]
               for i, length in enumerate([1, 7, 17, 33, 65, 333, 2, 12, 5, 40, 3, 100])]
    news = [1, 5, 16, 40, 9, 3, 30, 2, 17, 8, 25, 6]

    async def run():
        calls = []
        for at, (prompt, new) in enumerate(zip(prompts, news)):
            body = {"prompt": prompt, "max_tokens": new, "temperature": 0, "n": 1 + at % 2}
            if at % 3 == 0:
                body["stream"] = True
            calls.append(_call(server, "POST", "/v1/completions", body))
        return await asyncio.gather(*calls)

    try:
        answers = asyncio.run(run())
    finally:
        server.close()
    for at, (status, answer, _) in enumerate(answers):
        assert status == 200, answer
        want = _alone(alone_generator, prompts[at], news[at])
        choices = 1 + at % 2
        if at % 3 == 0:  # streamed: each choice's tokens in its chunks, then [DONE]
            assert answer[-1] == "[DONE]"
            for index in range(choices):
                got = [t for event in answer[:-1] for c in event["choices"]
                       if c["index"] == index for t in c["token_ids"]]
                reasons = [c["finish_reason"] for event in answer[:-1] for c in event["choices"]
                           if c["index"] == index and c["finish_reason"]]
                assert got == want and len(reasons) == 1, (at, index)
        else:
            assert [c["token_ids"] for c in answer["choices"]] == [want] * choices, at
            assert answer["usage"] == {"prompt_tokens": len(prompts[at]),
                                       "completion_tokens": len(want) * choices,
                                       "total_tokens": len(prompts[at]) + len(want) * choices}
            reason = "stop" if want[-1] == 2 else "length"  # the model's eos, 2
            assert all(c["finish_reason"] == reason for c in answer["choices"]), at


def test_stop_strings_cut_the_text_streamed_or_not(artifact):
    """/// A stop string ends the choice before it, in a stream too, where no
    text past it may have been sent."""
    server = _server(artifact)
    try:
        prompt = "The cat sat on"
        status, plain, _ = asyncio.run(_call(server, "POST", "/v1/completions",
                                             {"prompt": prompt, "max_tokens": 40,
                                              "temperature": 0}))
        text = plain["choices"][0]["text"]
        assert status == 200 and len(text) >= 12, plain
        stop = text[6:9]
        cut = text[:text.find(stop)]
        body = {"prompt": prompt, "max_tokens": 40, "temperature": 0, "stop": ["zzzz", stop]}
        status, answer, _ = asyncio.run(_call(server, "POST", "/v1/completions", body))
        assert answer["choices"][0]["text"] == cut
        assert answer["choices"][0]["finish_reason"] == "stop"
        status, events, _ = asyncio.run(_call(server, "POST", "/v1/completions",
                                              {**body, "stream": True, "n": 2}))
        for index in range(2):  # each choice: the text before the stop, one finish chunk
            mine = [c for e in events[:-1] for c in e["choices"] if c["index"] == index]
            assert "".join(c["text"] for c in mine) == cut
            assert [c["finish_reason"] for c in mine if c["finish_reason"]] == ["stop"]
    finally:
        server.close()


def test_chat_completions_apply_the_chat_template(artifact):
    server = _server(artifact)
    try:
        messages = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hello there"}]
        prompt = server.model.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                            tokenize=False)
        _, chat, _ = asyncio.run(_call(server, "POST", "/v1/chat/completions",
                                       {"messages": messages, "max_tokens": 12,
                                        "temperature": 0}))
        _, plain, _ = asyncio.run(_call(server, "POST", "/v1/completions",
                                        {"prompt": prompt, "max_tokens": 12, "temperature": 0}))
        assert chat["object"] == "chat.completion"
        assert chat["choices"][0]["message"] == {"role": "assistant",
                                                 "content": plain["choices"][0]["text"]}
        _, events, _ = asyncio.run(_call(server, "POST", "/v1/chat/completions",
                                         {"messages": messages, "max_tokens": 12,
                                          "temperature": 0, "stream": True}))
        assert events[0]["choices"][0]["delta"]["role"] == "assistant"
        assert "".join(e["choices"][0]["delta"]["content"] for e in events[:-1]) == \
            plain["choices"][0]["text"]
    finally:
        server.close()


def test_a_client_that_goes_away_frees_its_row(artifact):
    """/// The stream's consumer stops after one chunk (a disconnect): the
    request is cancelled and its row is free at the next step."""
    server = _server(artifact)

    async def run():
        response = await server(_request("POST", "/v1/completions",
                                         {"prompt": [5] * 20, "max_tokens": 400,
                                          "temperature": 0, "stream": True}))
        chunks = response.body_iterator
        await chunks.__anext__()
        assert server.generation.scheduler.running == 1
        await chunks.aclose()
        for _ in range(200):
            if server.generation.scheduler.running == 0:
                return True
            await asyncio.sleep(0.01)
        return False

    try:
        assert asyncio.run(run()), "the row was not freed"
    finally:
        server.close()


def test_a_full_queue_answers_429_with_retry_after(artifact):
    server = _server(artifact, rows=1, max_waiting=1)

    async def run():
        body = {"prompt": [5] * 8, "max_tokens": 60, "temperature": 0}
        return await asyncio.gather(*[_call(server, "POST", "/v1/completions", body)
                                      for _ in range(4)],
                                    _call(server, "POST", "/v1/completions", {**body, "n": 3}))

    try:
        answers = asyncio.run(run())
    finally:
        server.close()
    statuses = sorted(status for status, _, _ in answers[:4])
    assert 429 in statuses and 200 in statuses, statuses
    status, body, _ = answers[4]  # more choices than the queue holds: never, so a 400
    assert status == 400 and body["error"]["param"] == "n", body
    for status, body, headers in answers[:4]:
        if status == 429:
            assert headers["retry-after"] == "1"
            assert body["error"]["type"] == "server_overloaded"
        else:
            assert status == 200 and len(body["choices"][0]["token_ids"]) >= 1


def test_api_key_routes_and_methods(artifact):
    server = _server(artifact, api_key="sesame")
    try:
        body = {"prompt": [5], "max_tokens": 1}
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            status, answer, _ = asyncio.run(_call(server, "POST", "/v1/completions", body,
                                                  headers=headers))
            assert status == 401 and answer["error"]["param"] == "Authorization"
        ok = {"Authorization": "Bearer sesame"}
        status, _, _ = asyncio.run(_call(server, "POST", "/v1/completions", body, headers=ok))
        assert status == 200
        status, answer, _ = asyncio.run(_call(server, "POST", "/v1/embeddings", body,
                                              headers=ok))
        assert status == 404 and "/v1/completions" in answer["error"]["message"]
        status, answer, _ = asyncio.run(_call(server, "GET", "/v1/completions", headers=ok))
        assert status == 405
        status, answer, _ = asyncio.run(_call(server, "GET", "/v1/models", headers=ok))
        assert status == 200 and answer["data"][0]["id"] == "tiny"
    finally:
        server.close()
