"""``anyshape-serve`` as the README starts it (Ray Serve, two replicas, on
127.0.0.1): concurrent clients, streamed and not, through urllib and the
``openai`` client, each answer against ``generate`` alone; every bad input's
status and error; a client that disconnects; a replica killed mid-run."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import random
import time

import pytest
import torch
from serving import anyshape_serve, char_tokenizer, replica_processes, request, small_gpt2, stream

import anyshape

pytest.importorskip("ray.serve")
pytestmark = pytest.mark.builds_after_export

CLIENTS = 32


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(URL, server process, the artifact loaded here, the prompts and answers
    alone) of two replicas of a tiny GPT-2."""
    directory = tmp_path_factory.mktemp("served")
    anyshape.compile_generator(small_gpt2()).save(directory / "tiny")
    char_tokenizer(directory / "tokenizer")
    with anyshape_serve(directory / "tiny", "--replicas", "2", "--tokenizer",
                        str(directory / "tokenizer")) as (url, process):
        yield url, process, anyshape.load(directory / "tiny")


def _alone(generator, prompt: list, new: int) -> list:
    out = generator.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False,
                             pad_token_id=0)[0, len(prompt):].tolist()
    return out[:out.index(2) + 1] if 2 in out else out


def _workload(count: int, seed: int):
    pick = random.Random(seed)
    return [([pick.randrange(3, 256) for _ in range(pick.choice([1, 7, 17, 33, 65, 333]))],
             pick.choice([1, 8, 16, 33, 64])) for _ in range(count)]


def _ask(url: str, prompt: list, new: int, streamed: bool):
    """(status, the tokens) of one greedy completion."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": new, "temperature": 0}
    if streamed:
        events = stream(url, "/v1/completions", body)
        assert events[-1] == "[DONE]", events[-3:]
        return 200, [t for event in events[:-1] for c in event["choices"] for t in c["token_ids"]]
    status, answer = request(url, "/v1/completions", body)
    return status, answer["choices"][0]["token_ids"] if status == 200 else answer


def test_concurrent_clients_get_their_answers_alone(served):
    """/// 32 clients at once, half streamed, mixed prompt lengths (1 to 333)
    and max_tokens: each answer is generate's for its prompt alone."""
    url, _, generator = served
    work = _workload(CLIENTS, seed=1)
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(lambda a: _ask(url, *work[a], a % 2 == 0), range(CLIENTS)))
    for at, ((prompt, new), (status, tokens)) in enumerate(zip(work, answers)):
        assert status == 200, tokens
        assert tokens == _alone(generator, prompt, new), at


def test_the_openai_client_streams_and_counts(served):
    openai = pytest.importorskip("openai")
    url, _, generator = served
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", timeout=60, max_retries=0)
    whole = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=12,
                                      temperature=0)
    chunks = list(client.completions.create(model="tiny", prompt="Once upon a time",
                                            max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert whole.usage.prompt_tokens == len("Once upon a time")
    chat = client.chat.completions.create(model="tiny", max_tokens=5, temperature=0,
                                          messages=[{"role": "user", "content": "Hi"}])
    assert chat.choices[0].message.role == "assistant"
    sampled = [client.completions.create(model="tiny", prompt=[5, 6, 7], max_tokens=10,
                                         temperature=0.8, top_p=0.9, seed=11, n=2)
               for _ in range(2)]
    assert len(sampled[0].choices) == 2
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.completions.create(model="tiny", prompt=[5], max_tokens=0)


@pytest.mark.parametrize("body, raw, status, param", [
    (None, b'{"prompt": [5, 6', 400, "body"),
    ({"prompt": [5], "temperature": "warm"}, None, 400, "temperature"),
    ({"prompt": [5], "unknown_field": 1}, None, 400, "unknown_field"),
    ({"prompt": [5], "max_tokens": 0}, None, 400, "max_tokens"),
    ({"prompt": [5] * 512, "max_tokens": 1}, None, 400, "prompt"),
    ({"prompt": [5] * 500, "max_tokens": 20}, None, 400, "max_tokens"),
    ({"prompt": [5, 256]}, None, 400, "prompt"),
    ({"prompt": [5], "model": "gpt-4"}, None, 404, "model"),
])
def test_negative_bad_requests_get_their_status_and_field(served, body, raw, status, param):
    url, _, _ = served
    got, answer = request(url, "/v1/completions", body, raw=raw)
    assert got == status, answer
    assert answer["error"]["param"] == param and param in answer["error"]["message"]


def test_a_client_that_disconnects_frees_its_row(served):
    """/// The client reads one event of a long stream and hangs up: the
    replicas report no running row soon after."""
    url, _, _ = served
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("POST", "/v1/completions", json.dumps(
        {"prompt": [5] * 9, "max_tokens": 480, "temperature": 0, "stream": True}),
        {"Content-Type": "application/json"})
    answer = connection.getresponse()
    assert answer.status == 200 and answer.readline().startswith(b"data: ")
    connection.sock.close()
    connection.close()
    deadline, idle = time.monotonic() + 30, {}
    while time.monotonic() < deadline and (len(idle) < 2 or not all(idle.values())):
        _, health = request(url, "/health", method="GET")
        idle[health["replica"]] = health["running"] == 0 and health["waiting"] == 0
        time.sleep(0.1)
    assert len(idle) == 2 and all(idle.values()), idle


def _streamed_on(url: str, prompt: list, new: int, begun: list, started):
    """One streamed completion, read to its end or its failure: (the replica
    that answered, the tokens, whether it ended with [DONE]). Once its first
    tokens have come, its replica goes into ``begun`` and ``started`` is set."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    tokens, done, replica = [], False, None
    try:
        connection.request("POST", "/v1/completions", json.dumps(
            {"model": "tiny", "prompt": prompt, "max_tokens": new, "temperature": 0,
             "stream": True}), {"Content-Type": "application/json"})
        answer = connection.getresponse()
        replica = answer.getheader("x-anyshape-replica")
        if answer.status != 200:
            return replica, answer.status, False
        for line in answer:
            line = line.decode().strip()
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                event = json.loads(line[len("data: "):])
                if "error" in event:
                    break
                tokens += [t for c in event["choices"] for t in c["token_ids"]]
                begun.append(replica)
                started.set()
    except (OSError, http.client.HTTPException):
        pass  # the connection broke: an ending without [DONE]
    finally:
        connection.close()
    return replica, tokens, done


def test_a_killed_replica_fails_only_its_requests(served):
    """/// 32 streamed requests run on two replicas; the replica of the first
    to stream is killed. Every request ends, none hangs: a complete answer is
    its answer alone, at least one request on the killed replica ends
    without [DONE] (an error), every one on the other replica completes, and
    Ray's proxy answers those it had sent to the dead one with a 5xx. The
    server answers again after."""
    import threading

    import psutil

    url, process, generator = served
    replicas = {str(p.pid): p for p in replica_processes(process)}
    assert len(replicas) == 2, replicas
    work = [(prompt[:100], 400) for prompt, _ in _workload(CLIENTS, seed=2)]
    begun, started = [], threading.Event()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        futures = [pool.submit(_streamed_on, url, prompt, new, begun, started)
                   for prompt, new in work]
        assert started.wait(timeout=60)
        victim = begun[0]
        replicas[victim].kill()
        psutil.wait_procs([replicas[victim]], timeout=30)
        outcomes = [future.result(timeout=300) for future in futures]
    for (prompt, new), (replica, tokens, done) in zip(work, outcomes):
        if replica is None:  # Ray's proxy answered: the request's replica had died
            assert isinstance(tokens, int) and tokens >= 500, tokens
            continue
        assert replica in replicas, (replica, tokens)
        if done:
            assert tokens == _alone(generator, prompt, new)
        else:
            assert replica == victim, "a request on the other replica failed"
    print("killed replica: cut", sum(r == victim and not d for r, _, d in outcomes),
          "complete", sum(r == victim and d for r, _, d in outcomes), "; other replica:",
          sum(r not in (victim, None) for r, _, _ in outcomes), "; Ray's 5xx:",
          sum(r is None for r, _, _ in outcomes))
    assert any(not done for replica, _, done in outcomes if replica == victim), \
        "no request on the killed replica was cut"
    deadline = time.monotonic() + 120
    while True:
        status, tokens = _ask(url, [5, 6, 7], 4, False)
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert status == 200 and tokens == _alone(generator, [5, 6, 7], 4)
