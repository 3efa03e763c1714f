"""The checks of OpenAI's API requests (``anyshape.serve.openai_api``): each
bad field is refused with a 400 (or 404) naming it, and good ones come out
as what the engine runs."""

from __future__ import annotations

import pytest

from anyshape.serve.openai_api import (RequestError, ServedModel, completion_request,
                                       encode_request, parse_body)

MODEL = ServedModel("tiny", vocab_size=256, max_positions=64)


def _refused(body: dict, param: str, match: str, *, chat=False, model=MODEL, status=400):
    with pytest.raises(RequestError, match=match) as caught:
        completion_request(body, model, chat=chat)
    assert (caught.value.param, caught.value.status) == (param, status)
    error = caught.value.body()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert param in error["message"]


def test_a_good_request_keeps_its_fields():
    asked = completion_request({"model": "tiny", "prompt": [[5, 6], [7]], "max_tokens": 3,
                                "temperature": 0, "n": 2, "seed": 4, "stream": True,
                                "stream_options": {"include_usage": True}}, MODEL)
    assert asked.prompts == [[5, 6], [7]] and asked.max_tokens == 3 and asked.n == 2
    assert asked.temperature == 0 and asked.seed == 4 and asked.stream and asked.include_usage


def test_openai_defaults():
    """/// max_tokens 16 and temperature 1 (sampling), as OpenAI's completions."""
    asked = completion_request({"prompt": [1, 2, 3]}, MODEL)
    assert (asked.max_tokens, asked.temperature, asked.top_p, asked.n, asked.stream) == \
        (16, 1.0, 1.0, 1, False)


@pytest.mark.parametrize("raw", [b'{"prompt": [1', b"[1, 2]", b"\xff\xfe", b""])
def test_negative_malformed_json_names_the_body(raw):
    with pytest.raises(RequestError, match="body: expected a JSON object") as caught:
        parse_body(raw)
    assert caught.value.param == "body" and caught.value.status == 400


@pytest.mark.parametrize("body, param, match", [
    ({"prompt": [1], "max_tokens": 0}, "max_tokens", "at least 1, got 0"),
    ({"prompt": [1], "max_tokens": -3}, "max_tokens", "got -3"),
    ({"prompt": [1], "max_tokens": 2.5}, "max_tokens", "integer"),
    ({"prompt": [1], "max_tokens": True}, "max_tokens", "got True"),
    ({"prompt": [1, 256]}, "prompt", r"token id 256 is out of range \[0, 256\)"),
    ({"prompt": [[1], [-1]]}, "prompt", "token id -1"),
    ({"prompt": list(range(1, 65))}, "prompt", "64 tokens, past the model's 64 positions"),
    ({"prompt": list(range(1, 60)), "max_tokens": 6}, "max_tokens", "exceed the model's 64"),
    ({"prompt": []}, "prompt", "non-empty"),
    ({"prompt": [[]]}, "prompt", "empty prompt"),
    ({"prompt": "hello"}, "prompt", "text needs the server's tokenizer"),
    ({}, "prompt", "required"),
    ({"prompt": [1], "temperature": 2.5}, "temperature", r"in \[0.0, 2.0\], got 2.5"),
    ({"prompt": [1], "temperature": "hot"}, "temperature", "got 'hot'"),
    ({"prompt": [1], "top_p": 0}, "top_p", r"in \(0.0, 1.0\]"),
    ({"prompt": [1], "n": 0}, "n", "n: expected an integer in"),
    ({"prompt": [1], "n": 17}, "n", "got 17"),
    ({"prompt": [1], "stop": "x"}, "stop", "need the server's tokenizer"),
    ({"prompt": [1], "stop": 5}, "stop", "got 5"),
    ({"prompt": [1], "stream": "yes"}, "stream", "boolean"),
    ({"prompt": [1], "stream_options": {"include_usage": True}}, "stream_options",
     "only with stream"),
    ({"prompt": [1], "seed": "s"}, "seed", "integer"),
    ({"prompt": [1], "seed": 2 ** 64}, "seed", "integer in"),
    ({"prompt": [1], "seed": -1}, "seed", "got -1"),
    ({"prompt": [1], "frobnicate": 1}, "frobnicate", "unrecognized request argument"),
    ({"prompt": [1], "logprobs": 2}, "logprobs", "not supported"),
    ({"prompt": [1], "echo": True}, "echo", "not supported"),
    ({"prompt": [1], "presence_penalty": 0.5}, "presence_penalty", "not supported"),
    ({"prompt": [1], "model": 3}, "model", "expected a string"),
])
def test_negative_bad_fields_are_refused_naming_them(body, param, match):
    _refused(body, param, match)


def test_fields_at_their_off_values_are_taken():
    """/// What OpenAI's clients send by default (logprobs null, penalties 0)."""
    asked = completion_request({"prompt": [1], "logprobs": None, "echo": False,
                                "presence_penalty": 0, "frequency_penalty": 0.0,
                                "logit_bias": {}, "best_of": 1, "user": "u"}, MODEL)
    assert asked.prompts == [[1]]


def test_negative_another_model_is_not_found():
    _refused({"prompt": [1], "model": "gpt-4"}, "model", "serves 'tiny', got 'gpt-4'",
             status=404)


def test_negative_chat_without_a_chat_template_is_refused():
    _refused({"messages": [{"role": "user", "content": "hi"}]}, "messages",
             "no chat template", chat=True, status=404)


class _Tokenizer:
    chat_template = "x"

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) % 200 + 3 for c in text]}

    def apply_chat_template(self, turns, add_generation_prompt, tokenize):
        return {"input_ids": [5] * sum(len(t["content"]) for t in turns)}


@pytest.mark.parametrize("messages, param", [
    ([], "messages"), ("hi", "messages"), ([{"role": "user"}], "messages[0]"),
    ([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}], "messages[1]"),
])
def test_negative_bad_chat_messages_name_the_message(messages, param):
    model = ServedModel("tiny", 256, 64, _Tokenizer())
    _refused({"messages": messages}, param, "expected", chat=True, model=model)


def test_negative_text_whose_ids_the_model_lacks_is_refused():
    """/// A tokenizer may know more ids than the model's table."""
    model = ServedModel("tiny", 101, 64, _Tokenizer())  # "a" is 100, "b" 101
    _refused({"prompt": "ab"}, "prompt", "token id 101 is out of range", model=model)
    with pytest.raises(RequestError, match="token id 101") as caught:
        encode_request({"input": ["b"]}, model, embeddings=True)
    assert caught.value.param == "input"


def test_chat_prompt_and_text_prompts_use_the_tokenizer():
    model = ServedModel("tiny", 256, 64, _Tokenizer())
    assert completion_request({"messages": [{"role": "user", "content": "abc"}]}, model,
                              chat=True).prompts == [[5, 5, 5]]
    asked = completion_request({"prompt": ["ab", "c"], "stop": ["\n"]}, model)
    assert asked.prompts == [[100, 101], [102]] and asked.stop == ["\n"]


@pytest.mark.parametrize("body, param, match", [
    ({}, "input", "required"),
    ({"input": [1, 999]}, "input", "token id 999"),
    ({"input": list(range(1, 66))}, "input", "65 tokens, past the model's 64"),
    ({"input": [1], "encoding_format": "hex"}, "encoding_format", "got 'hex'"),
    ({"input": [1], "dimensions": 8}, "dimensions", "not supported"),
    ({"input": [1], "temperature": 1}, "temperature", "unrecognized"),
])
def test_negative_bad_embedding_requests_name_the_field(body, param, match):
    with pytest.raises(RequestError, match=match) as caught:
        encode_request(body, MODEL, embeddings=True)
    assert caught.value.param == param and caught.value.status == 400


def test_embedding_inputs_of_every_form():
    model = ServedModel("tiny", 256, 64, _Tokenizer())
    for given, want in [("ab", [[100, 101]]), (["a", "b"], [[100], [101]]), ([4, 5], [[4, 5]]),
                        ([[4], [5, 6]], [[4], [5, 6]])]:
        assert encode_request({"input": given}, model, embeddings=True).inputs == want
