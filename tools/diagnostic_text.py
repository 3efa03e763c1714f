"""Diagnostics printed as mlir-opt prints them (LLVM's SourceMgr format)::

    file.mlir:3:8: error: 'func.return' op has 0 operands, ...
      return
      ^

with the source line and a caret when the file is the input (or readable), and
``<unknown>:0:`` for a diagnostic without a file location.
"""

from __future__ import annotations


def render(severity: str, message: str, file: str | None, line: int = 0, column: int = 0,
           sources: dict[str, str] | None = None, show_source: bool = True,
           span: int = 1) -> str:
    """``span``: how many characters from the column to mark (``^~~~``)."""
    if file is None or (not file and not line):
        return f"<unknown>:0: {severity}: {message}"
    head = f"{file}:{line}:{column}: {severity}: {message}"
    text = _source(file, sources if sources is not None else {}) if show_source else None
    lines = text.split("\n") if text is not None else []
    if not 1 <= line <= len(lines):
        return head
    source_line = lines[line - 1]
    # The caret sits under the column; tabs before it are kept so it lines up.
    prefix = "".join(ch if ch == "\t" else " " for ch in source_line[:max(column - 1, 0)])
    marked = max(1, min(span, len(source_line) - len(prefix)))
    return f"{head}\n{source_line}\n{prefix}^{'~' * (marked - 1)}"


def _source(file: str, sources: dict[str, str]) -> str | None:
    if file in sources:
        return sources[file]
    try:
        with open(file) as f:
            sources[file] = f.read()
    except (OSError, UnicodeDecodeError):
        sources[file] = None
    return sources[file]
