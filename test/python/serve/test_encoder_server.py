"""An encoder behind ``ModelServer`` in this process: embeddings (a masked
mean pooling, padding eliminated) and a classifier, requests of mixed lengths
at once, each row against eager on that input alone."""

from __future__ import annotations

import asyncio

import pytest
import torch
from serving import MeanPooled
from test_model_server import _call
from torch.export import Dim

import anyshape
from anyshape.serve.app import ModelServer, ServerOptions

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.builds_after_export


def _bert(**overrides):
    config = transformers.BertConfig(vocab_size=300, hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=128,
                                     max_position_embeddings=128, **overrides)
    torch.manual_seed(0)
    return config


def _saved(model, directory):
    ids = torch.randint(3, 300, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    dims = {0: Dim("batch"), 1: Dim("seq")}
    anyshape.compile(model, (ids, mask), dynamic_shapes=(dims, dims),
                     padding="eliminate").save(directory)
    return directory


def _inputs(count: int, seed: int) -> list:
    generator = torch.Generator().manual_seed(seed)
    lengths = [1, 7, 17, 33, 65, 3, 12, 100][:count]
    return [torch.randint(3, 300, (n,), generator=generator).tolist() for n in lengths]


def _ask_at_once(server, path: str, groups: list):
    async def run():
        return await asyncio.gather(*[_call(server, "POST", path, {"input": group})
                                      for group in groups])
    return asyncio.run(run())


def test_embeddings_of_concurrent_requests_are_eagers_alone(tmp_path):
    model = MeanPooled(transformers.BertModel(_bert())).eval()
    server = ModelServer(_saved(model, tmp_path / "pooled"), ServerOptions())
    groups = [_inputs(3, 1), _inputs(8, 2), [_inputs(5, 3)[4]], _inputs(2, 4)]
    try:
        assert server.task == "embeddings" and server.model.max_positions in (None, 128)
        answers = _ask_at_once(server, "/v1/embeddings", groups)
    finally:
        server.close()
    for group, (status, answer, _) in zip(groups, answers):
        assert status == 200, answer
        assert [d["index"] for d in answer["data"]] == list(range(len(group)))
        assert answer["usage"]["prompt_tokens"] == sum(len(ids) for ids in group)
        for ids, row in zip(group, answer["data"]):
            with torch.no_grad():
                want = model(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))[0]
            torch.testing.assert_close(torch.tensor(row["embedding"]), want, atol=2e-5,
                                       rtol=1e-4)


def test_classify_gives_eagers_probabilities(tmp_path):
    model = transformers.BertForSequenceClassification(_bert(num_labels=3)).eval()
    server = ModelServer(_saved(model, tmp_path / "classifier"), ServerOptions())
    groups = [_inputs(4, 5), _inputs(2, 6)]
    try:
        assert server.task == "classify"
        answers = _ask_at_once(server, "/v1/classify", groups)
        status, refused, _ = asyncio.run(_call(server, "POST", "/v1/classify",
                                               {"input": [[5, 300]]}))
    finally:
        server.close()
    assert status == 400 and refused["error"]["param"] == "input", refused
    for group, (status, answer, _) in zip(groups, answers):
        assert status == 200, answer
        for ids, row in zip(group, answer["data"]):
            with torch.no_grad():
                logits = model(torch.tensor([ids])).logits[0].double()
            torch.testing.assert_close(torch.tensor(row["probs"], dtype=torch.float64),
                                       torch.softmax(logits, -1), atol=1e-5, rtol=1e-4)
            assert row["label"] == f"LABEL_{int(torch.argmax(logits))}"


def test_negative_an_encoder_asked_for_another_task_is_refused(tmp_path):
    model = transformers.BertForSequenceClassification(_bert(num_labels=2)).eval()
    with pytest.raises(ValueError, match="task: this artifact returns .*asked for 'embeddings'"):
        ModelServer(_saved(model, tmp_path / "c"), ServerOptions(task="embeddings"))
