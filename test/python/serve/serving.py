"""What the serving tests share: a small random-weight GPT-2 generator saved
as an artifact, a character-level tokenizer for it (with a chat template),
mean pooling for an encoder, ``anyshape-serve`` started as the README says,
and an HTTP client."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import torch

VOCAB = 256
CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;!?'-\n"
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "assistant:")


class MeanPooled(torch.nn.Module):
    """sentence-transformers' mean pooling over an encoder's token states, the
    padding masked out."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids, attention_mask):
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask)[0]
        weights = attention_mask.unsqueeze(-1).float()
        return (states * weights).sum(1) / torch.clamp(weights.sum(1), min=1e-9)


def small_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=VOCAB, n_positions=512, n_embd=64, n_layer=2, n_head=4,
                        initializer_range=0.3, bos_token_id=2, eos_token_id=2)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return GPT2LMHeadModel(config).eval()


def char_tokenizer(directory: Path) -> Path:
    """A tokenizer of one token a character (ids 3 on), the rest of the 256
    ids tokens of their own ("[200]"), saved in ``directory``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, "<eos>": 2}
    for char in CHARS:
        vocab[char] = len(vocab)
    while len(vocab) < VOCAB:
        vocab[f"[{len(vocab)}]"] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>",
                                   unk_token="<unk>", eos_token="<eos>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return directory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def anyshape_serve(artifact: Path, *options: str, timeout: float = 180, stop_after: float = 900):
    """``anyshape-serve ARTIFACT --port P OPTIONS`` until it answers /health;
    yields (base URL, the process). Stopped with SIGTERM at the end, and by
    itself after ``stop_after`` seconds whatever happens here."""
    port = free_port()
    command = [sys.executable, "-m", "anyshape.tools.serve", str(artifact), "--port", str(port),
               "--stop-after", str(stop_after), *options]
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"anyshape-serve-{port}.log", "w+")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                log.seek(0)
                raise AssertionError(f"anyshape-serve exited with {process.returncode}:\n"
                                     f"{log.read()[-4000:]}")
            try:
                status, _ = request(url, "/health", method="GET", timeout=5)
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                log.seek(0)
                raise AssertionError(f"anyshape-serve did not answer in {timeout} s:\n"
                                     f"{log.read()[-4000:]}")
            time.sleep(0.5)
        yield url, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        log.close()


def request(url: str, path: str, body=None, *, method: str = "POST", timeout: float = 120,
            headers: dict | None = None, raw: bytes | None = None):
    """(status, the JSON answer) of one request."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    sent = urllib.request.Request(url + path, data=data, method=method,
                                  headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(sent, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        text = error.read()
        try:
            return error.code, {**json.loads(text), "_headers": dict(error.headers)}
        except json.JSONDecodeError:
            return error.code, {"_text": text.decode(errors="replace"),
                                "_headers": dict(error.headers)}


def stream(url: str, path: str, body: dict, *, timeout: float = 120) -> list:
    """A streamed answer's events (the JSON of each ``data:`` line, then "[DONE]")."""
    sent = urllib.request.Request(url + path, data=json.dumps({**body, "stream": True}).encode(),
                                  method="POST", headers={"Content-Type": "application/json"})
    events = []
    with urllib.request.urlopen(sent, timeout=timeout) as answer:
        assert answer.headers["Content-Type"].startswith("text/event-stream")
        for line in answer:
            line = line.decode().strip()
            if line.startswith("data: "):
                payload = line[len("data: "):]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def replica_processes(server: subprocess.Popen) -> list:
    """The Ray Serve replica processes under ``server``'s own Ray."""
    import psutil

    return [child for child in psutil.Process(server.pid).children(recursive=True)
            if "ServeReplica" in " ".join(_cmdline(child))]


def _cmdline(process) -> list:
    try:
        return process.cmdline()
    except Exception:  # noqa: BLE001 - gone, or not ours to read
        return []
