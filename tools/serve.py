"""anyshape-serve: serve a compiled artifact over HTTP with OpenAI's API, on Ray Serve.

A generator (``anyshape-compile --task text-generation``, ``Generator.save``)
serves /v1/completions, and /v1/chat/completions when the tokenizer has a
chat template; an encoder whose output is a [batch, dim] tensor serves
/v1/embeddings, a classifier (an output with logits) /v1/classify. Concurrent
requests are batched: a generator's continuously, an encoder's as padded
batches. Ray is started on this machine unless --address names a running
cluster. Needs ``pip install anyshape[serve]``.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="anyshape-serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artifact", help="an artifact directory (anyshape-compile, save)")
    parser.add_argument("--tokenizer", metavar="DIR",
                        help="a HF tokenizer directory (text prompts, stop strings, chat)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--replicas", type=int, default=1, help="replica processes (default 1)")
    parser.add_argument("--address", metavar="RAY_ADDRESS",
                        help="a running Ray cluster's address (default: start Ray here)")
    parser.add_argument("--name", help="the model name clients send (default: the artifact's "
                                       "folder name)")
    parser.add_argument("--task", choices=["generate", "embeddings", "classify"],
                        help="what to serve (default: what the artifact is)")
    parser.add_argument("--api-key", default=os.environ.get("ANYSHAPE_API_KEY") or None,
                        help="require 'Authorization: Bearer KEY' (default: $ANYSHAPE_API_KEY; "
                             "unset or empty: no key)")
    parser.add_argument("--rows", type=int, help="a generator's batch rows per replica "
                                                  "(default: its largest decode batch, 8)")
    parser.add_argument("--cache-bytes", type=int,
                        help="a replica's bound on its key/value cache (default: none)")
    parser.add_argument("--max-waiting", type=int, default=64,
                        help="requests a replica queues before answering 429 (default 64)")
    parser.add_argument("--max-batch", type=int, default=32,
                        help="an encoder's inputs per batch (default 32)")
    parser.add_argument("--threads", type=int,
                        help="threads per replica (default: this machine's cores over the "
                             "replicas)")
    parser.add_argument("--stop-after", type=float, metavar="SECONDS",
                        help="stop by itself after this long (default: at Ctrl-C or SIGTERM)")
    return parser


def _check(parser, args) -> None:
    path = Path(args.artifact)
    if not (path / "manifest.json").is_file():
        parser.error(f"artifact: expected an anyshape artifact directory (with manifest.json), "
                     f"got '{args.artifact}'")
    if args.tokenizer is not None and not Path(args.tokenizer).is_dir():
        parser.error(f"--tokenizer: expected a HF tokenizer directory, got '{args.tokenizer}'")
    for name in ("replicas", "max_waiting", "max_batch"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected at least 1, got "
                         f"{getattr(args, name)}")
    for name in ("rows", "threads", "cache_bytes"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected at least 1, got "
                         f"{getattr(args, name)}")
    if args.stop_after is not None and not (math.isfinite(args.stop_after) and
                                            args.stop_after > 0):
        parser.error(f"--stop-after: expected a positive number of seconds, got "
                     f"{args.stop_after}")
    if not 0 < args.port < 65536:
        parser.error(f"--port: expected 1 to 65535, got {args.port}")


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    try:
        import ray
        from ray import serve
    except ImportError:
        print("anyshape-serve: needs Ray Serve: pip install 'anyshape[serve]'", file=sys.stderr)
        return 2
    from anyshape.serve.app import ServerOptions
    from anyshape.serve.ray_app import APPLICATION, application

    threads = args.threads or max(1, (os.cpu_count() or 1) // args.replicas)
    options = ServerOptions(tokenizer=None if args.tokenizer is None else
                            str(Path(args.tokenizer).resolve()), name=args.name, task=args.task,
                            api_key=args.api_key or None, rows=args.rows,
                            cache_bytes=args.cache_bytes,
                            max_waiting=args.max_waiting, max_batch=args.max_batch,
                            threads=threads)
    ray.init(address=args.address, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        serve.run(application(args.artifact, options, args.replicas), name=APPLICATION,
                  route_prefix="/")
        print(f"anyshape-serve: {args.artifact} at http://{args.host}:{args.port}/v1 "
              f"({args.replicas} replica{'s' if args.replicas > 1 else ''})", flush=True)
        deadline = None if args.stop_after is None else time.monotonic() + args.stop_after
        while not stop.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            stop.wait(timeout=1.0 if left is None else min(left, 1.0))
    finally:
        serve.delete(APPLICATION)
        if args.address is None:
            serve.shutdown()
        ray.shutdown()
    print("anyshape-serve: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
