"""The command line of a docs page generated from the code (docs/passes.md,
docs/workarounds.md): write it, or with ``--check`` exit 1 when it is stale."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable


def main(description: str, page: Path, render: Callable[[], str], script: str,
         argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true",
                        help=f"compare with {page.parent.name}/{page.name} instead of writing it")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not page.exists() or page.read_text() != text:
            print(f"{page} is stale: run python {script}", file=sys.stderr)
            return 1
        return 0
    page.write_text(text)
    return 0
