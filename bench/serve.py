"""Serving over HTTP on loopback: anyshape-serve against static batches, one
request at a time, HF eager and the llama.cpp server.

A seeded stream of completion requests arrives in real time (Poisson, at
each ``--rates`` requests per second): prompts of long-tailed real lengths
(``served.request_lengths``: most 10 to 80 tokens, a few up to 512), 16 to 256
new tokens (log-uniform), greedy, on GPT-2 small (random weights, float32, no
end token, so every request gets its length; ``--small``: 2 layers). Every
request is streamed (server-sent events) by an aiohttp client on 127.0.0.1,
which notes when each token comes. The systems, each a server process:

- ``anyshape-serve``: ``anyshape-serve`` as the README starts it (Ray Serve,
  one replica, 8 rows): continuous batching;
- ``anyshape-one-at-a-time``: the same with ``--rows 1``;
- ``anyshape-static-8``: the same artifact behind the same HTTP front
  (``ModelServer`` under uvicorn), whose engine runs the waiting requests (up
  to 8) as one left-padded ``generate`` call until its longest is done;
- ``hf-eager-static-8``: HF's ``generate`` on the PyTorch model, eager, the
  same front and batches;
- ``llama.cpp-server``: llama.cpp's ``llama-server`` (``--llama-server
  PATH``, built from the llama-cpp-python sdist's llama.cpp) on the model
  converted by llama.cpp's converter to a float32 GGUF (``--llama-python``, a
  Python with that sdist's ``convert_hf_to_gguf.py``), 8 parallel slots,
  continuous batching, its ``/completion`` route with token ids.

Per system and rate: throughput (new tokens over the time from the first
arrival to the last token), time to first token (arrival to first token) and
the time between tokens, p50 and p99.

    python bench/serve.py [--requests 32] [--rates 1 2 4] [--small]
        [--systems ...] [--llama-server PATH --llama-python PYTHON] [--out DIR]

Writes ``serve.md`` and ``serve.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from continuous_batching import summary  # noqa: E402
from family_sweep import host_cpu  # noqa: E402
from served import request_lengths  # noqa: E402

SYSTEMS = ("anyshape-serve", "anyshape-static-8", "anyshape-one-at-a-time", "hf-eager-static-8",
           "llama.cpp-server")
ROWS = 8


def workload(count: int, rate: float, seed: int, vocab: int, max_positions: int):
    """(arrival s, prompt ids, new tokens) per request, in arrival order."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = request_lengths(count, seed, 512)
    new = [int(n) for n in np.rint(np.exp(rng.uniform(np.log(16), np.log(256), count)))]
    arrivals = np.cumsum(rng.exponential(1.0 / rate, count))
    ids = np.random.default_rng(seed + 1)
    return [(float(at), [int(t) for t in ids.integers(3, vocab, n)], min(m, max_positions - n))
            for at, n, m in zip(arrivals, lengths, new)]


# -- the static-batch front (a server process of its own) ----------------------------------------

class StaticBatches:
    """``GenerationEngine``'s interface over ``generate`` (anyshape's or HF's):
    whenever idle, the waiting requests (up to ``rows``) run as one left-padded
    call until the longest is done, each row's tokens sent as they come."""

    def __init__(self, generate, rows: int):
        self._generate, self.rows = generate, rows
        self._queue, self._lock = [], threading.Condition()
        self.running = 0
        threading.Thread(target=self._run, daemon=True).start()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def submit(self, prompt, callback, *, max_new_tokens, do_sample=False, **_):
        if do_sample:
            raise ValueError("temperature: the static-batch front is greedy only")
        job = [prompt, max_new_tokens, callback]
        with self._lock:
            self._queue.append(job)
            self._lock.notify()
        return job

    def cancel(self, job) -> None:
        pass  # a static batch runs to its end

    def close(self) -> None:
        pass

    def _run(self) -> None:
        import torch

        while True:
            with self._lock:
                while not self._queue:
                    self._lock.wait()
                batch, self._queue = self._queue[:self.rows], self._queue[self.rows:]
            self.running = len(batch)
            width = max(len(prompt) for prompt, _, _ in batch)
            ids = torch.zeros(len(batch), width, dtype=torch.long)
            mask = torch.zeros(len(batch), width, dtype=torch.long)
            for row, (prompt, _, _) in enumerate(batch):
                ids[row, width - len(prompt):] = torch.tensor(prompt)
                mask[row, width - len(prompt):] = 1
            sent = [0] * len(batch)

            class Streamer:
                first = True

                def put(self, value):
                    if Streamer.first:  # the first call passes the prompt
                        Streamer.first = False
                        return
                    for row, (_, new, callback) in enumerate(batch):
                        if sent[row] < new:
                            sent[row] += 1
                            callback([int(value.reshape(-1)[row])], None if sent[row] < new
                                     else "length", None)

                def end(self):
                    pass

            try:
                self._generate(ids, mask, max(new for _, new, _ in batch), Streamer())
            except Exception as error:  # noqa: BLE001 - every caller hears of it
                for _, _, callback in batch:
                    callback([], None, error)
            self.running = 0


def front(args) -> int:
    """``serve.py front``: a static-batch server of ``--engine`` on ``--port``."""
    import torch
    import uvicorn

    from anyshape.serve.app import ModelServer
    from anyshape.serve.openai_api import ServedModel

    if args.engine == "anyshape":
        import anyshape

        generator = anyshape.load(args.model)

        def generate(ids, mask, new, streamer):
            generator.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                               do_sample=False, pad_token_id=0, streamer=streamer)
        vocab, positions = generator.vocab_size, generator.max_positions
    else:
        import transformers

        model = transformers.AutoModelForCausalLM.from_pretrained(args.model).eval()

        def generate(ids, mask, new, streamer):
            with torch.no_grad():
                model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                               do_sample=False, pad_token_id=0, streamer=streamer)
        vocab, positions = model.config.vocab_size, model.config.n_positions
    server = ModelServer.around(StaticBatches(generate, ROWS),
                                ServedModel(args.name, vocab, positions))

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        from starlette.requests import Request

        response = await server(Request(scope, receive))
        await response(scope, receive, send)

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


# -- the client ---------------------------------------------------------------------------------

async def _one(session, url: str, system: str, start: float, arrival: float, prompt, new):
    """When each of the request's tokens came, in seconds from ``start``."""
    import aiohttp

    await asyncio.sleep(max(0.0, start + arrival - time.monotonic()))
    if system == "llama.cpp-server":
        path, body = "/completion", {"prompt": prompt, "n_predict": new, "stream": True,
                                     "ignore_eos": True, "temperature": 0, "cache_prompt": False,
                                     "return_tokens": True}
    else:
        path, body = "/v1/completions", {"model": "gpt2", "prompt": prompt, "max_tokens": new,
                                         "temperature": 0, "stream": True}
    times = []
    async with session.post(url + path, json=body,
                            timeout=aiohttp.ClientTimeout(total=1800)) as answer:
        if answer.status != 200:
            raise RuntimeError(f"{system}: {answer.status} {await answer.text()}")
        async for line in answer.content:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            if "error" in event:
                raise RuntimeError(f"{system}: {event['error']}")
            count = len(event.get("tokens", [])) if system == "llama.cpp-server" else \
                sum(len(c["token_ids"]) for c in event["choices"])
            times += [time.monotonic() - start] * count
    if len(times) != new:
        raise RuntimeError(f"{system}: {len(times)} tokens of {new}")
    return times


async def drive(url: str, system: str, requests) -> list:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.monotonic()
        return await asyncio.gather(*[_one(session, url, system, start, at, prompt, new)
                                      for at, prompt, new in requests])


# -- the servers --------------------------------------------------------------------------------

def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A system's server process on 127.0.0.1, until it answers ``ready``."""

    def __init__(self, command: list, ready: str, log: Path, timeout: float = 600):
        self.port = int(command[command.index("--port") + 1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log, "w")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = time.monotonic() + timeout
        import urllib.request

        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{command[:3]} exited: see {log}")
            try:
                with urllib.request.urlopen(self.url + ready, timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{command[:3]} did not start in {timeout} s: see {log}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()


def start(system: str, work: Path, args) -> Server:
    port = str(_free_port())
    artifact, hf = work / "gpt2", work / "hf"
    python = sys.executable
    if system in ("anyshape-serve", "anyshape-one-at-a-time"):
        rows = ["--rows", "1"] if system == "anyshape-one-at-a-time" else []
        command = [python, "-m", "anyshape.tools.serve", str(artifact), "--port", port,
                   "--stop-after", "3600", *rows]
    elif system in ("anyshape-static-8", "hf-eager-static-8"):
        engine, model = ("anyshape", artifact) if system == "anyshape-static-8" else ("hf", hf)
        command = [python, str(Path(__file__).resolve()), "front", "--engine", engine,
                   "--model", str(model), "--name", "gpt2", "--port", port]
    else:
        if not args.llama_server or not args.llama_python:
            raise RuntimeError("llama.cpp-server needs --llama-server and --llama-python")
        gguf = work / "llama" / "model-f32.gguf"
        if not gguf.exists():
            gguf.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([args.llama_python, "-c",
                            "import sys; sys.path.insert(0, sys.argv[1]); "
                            "import generate_llama_worker as w; "
                            "w.convert(sys.argv[2], __import__('pathlib').Path(sys.argv[3]))",
                            str(HERE), str(hf), str(gguf.parent)], check=True)
        threads = str(os.cpu_count() or 1)
        command = [args.llama_server, "-m", str(gguf), "--host", "127.0.0.1", "--port", port,
                   "--parallel", str(ROWS), "--cont-batching", "--ctx-size",
                   str(ROWS * 1024), "--threads", threads, "--threads-batch", threads,
                   "--no-webui"]
    return Server(command, "/health", work / f"{system}.log")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["front"]:
        parser = argparse.ArgumentParser(prog="serve.py front")
        parser.add_argument("--engine", choices=["anyshape", "hf"], required=True)
        parser.add_argument("--model", required=True)
        parser.add_argument("--name", default="gpt2")
        parser.add_argument("--port", type=int, required=True)
        return front(parser.parse_args(argv[1:]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rates", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true", help="a 2-layer GPT-2, for a quick look")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--llama-server", help="llama.cpp's llama-server binary")
    parser.add_argument("--llama-python", help="a Python with llama-cpp-python's sdist converter")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "serve")
    args = parser.parse_args(argv)

    import torch
    import transformers

    import anyshape

    sys.path.insert(0, str(HERE))
    from generate import _save_with_tokenizer

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(eos_token_id=None, **(dict(n_layer=2) if args.small else {}))
    model = transformers.GPT2LMHeadModel(config).eval()
    results = []
    with tempfile.TemporaryDirectory(prefix="anyshape-bench-serve-") as directory:
        work = Path(directory)
        _save_with_tokenizer(model, work / "hf")
        anyshape.compile_generator(model).save(work / "gpt2")
        for system in args.systems:
            server = start(system, work, args)
            try:
                warm = workload(4, 100.0, args.seed + 99, config.vocab_size, config.n_positions)
                asyncio.run(drive(server.url, system, [(0.0, p, 8) for _, p, _ in warm]))
                for rate in args.rates:
                    requests = workload(args.requests, rate, args.seed, config.vocab_size,
                                        config.n_positions)
                    row = {"rate": rate, "system": system,
                           **summary(requests, asyncio.run(drive(server.url, system, requests)))}
                    print(json.dumps(row), flush=True)
                    results.append(row)
            finally:
                server.stop()
    command = "python bench/serve.py " + shlex.join(argv)
    host = host_cpu()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "serve.json").write_text(json.dumps({"host": host, "command": command,
                                                     "results": results}, indent=1))
    lines = [f"# Serving over HTTP, {'2-layer ' if args.small else ''}GPT-2 small, greedy, "
             f"streamed", "", f"Host: {host}. Command: `{command}`.", "",
             "| rate (req/s) | system | tokens/s | TTFT p50 ms | TTFT p99 ms | "
             "between tokens p50 ms | p99 ms |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['rate']:g} | {r['system']} | {r['tokens_per_s']:.1f} | "
              f"{r['ttft_p50_ms']:.0f} | {r['ttft_p99_ms']:.0f} | {r['itl_p50_ms']:.1f} | "
              f"{r['itl_p99_ms']:.1f} |" for r in sorted(results, key=lambda r: (r["rate"],
                                                                                 SYSTEMS.index(r["system"])))]
    (args.out / "serve.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
