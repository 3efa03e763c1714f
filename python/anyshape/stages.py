"""The names of the compile stages that the compiler and the runtime share, the
reproducer a failing stage keeps (``driver/compile.py`` and ``iree/invocation.py``),
and the record of a workaround of an upstream bug (``Workaround``), by the stage
it acts in.

A module of its own, importing nothing of anyshape, so that every layer (the
runtime, which needs only torch, numpy and iree-base-runtime, included) reads
them without importing the compiler.

A module that works around torch.export, torch-mlir or IREE declares it at
module level, in ``WORKAROUNDS``, a tuple of ``Workaround``: the stage it acts
in, the upstream bug or behaviour, the test that guards it (fails when it is
removed, or when upstream changes so that it can go), and when it can go.
``anyshape.tools.workaround_index`` collects them, and
``tools/dev/gen_workarounds_doc.py`` writes ``docs/workarounds.md`` from them
(``test_docs.py`` fails when that page is stale, and when a declared guard
names a test that does not exist). It is the page the next IREE or
torch-mlir upgrade starts from.

What a long compile is doing, shown while it runs (``progress=``): every
stage reports through one function of a message. A message that opens with
two spaces is a detail of the stage running; any other message starts a
stage. ``progress_printer`` makes that function from ``progress=``:

- ``"bars"`` (what ``True`` means where stderr is a terminal, and the CLI's
  default there): a line per stage whose clock runs while the stage does
  (tqdm); its details are printed above it as they come. A finished stage
  keeps its line, with its time.
- ``"lines"`` (``True`` elsewhere: a log, a notebook's captured stderr): a
  line per message, with the seconds since the compile began.
- a callable: called with each message, as it is.
- ``False``: nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

IMPORT_STAGE = "import"          # the torch dialect as imported
IREE_INPUT_STAGE = "iree-input"  # exactly what IREE receives (IREE's own ops included)
IREE_COMPILE_STAGE = "iree-compile"


# A reproducer outside dump_ir_dir gets a temporary directory of its own.
REPRO_PREFIX = "anyshape-repro-"


def file_digest(path: Path) -> str:
    """The SHA-256 of the file ``path``, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def keep_reproducer(stage_file: Path, dump_ir_dir, stem: str) -> Path:
    """A copy of ``stage_file`` (the input of a failing stage), named ``stem``, in
    ``dump_ir_dir`` or else in a temporary directory of its own."""
    directory = Path(dump_ir_dir) if dump_ir_dir else Path(tempfile.mkdtemp(prefix=REPRO_PREFIX))
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{stem}.mlirbc"
    target.write_bytes(stage_file.read_bytes())
    return target


def discard_reproducer(reproducer: str, dump_ir_dir) -> None:
    """Remove the reproducer of a failure a fallback recovered from and nothing
    reports: outside ``dump_ir_dir`` it is a directory of its own that would
    otherwise stay in the temporary directory after every such compile."""
    path = Path(reproducer)
    if dump_ir_dir is None and path.parent.name.startswith(REPRO_PREFIX):
        shutil.rmtree(path.parent, ignore_errors=True)


# Where in the pipeline a workaround acts, in pipeline order.
WORKAROUND_STAGES = {
    "export": "torch.export and the decomposition table",
    "import": "rewrites and refusals on the exported graph, before torch-mlir imports it",
    "torch-ir": "anyshape passes on the torch dialect",
    "iree-input": "rewrites of what IREE receives",
    "iree-flags": "iree-compile flags",
    "iree-fallback": "compiled again another way when iree-compile fails",
    "generation": "what compile_generator exports and compiles for generate",
    "runtime": "running a compiled module",
}


@dataclasses.dataclass(frozen=True)
class Workaround:
    name: str
    stage: str          # a key of WORKAROUND_STAGES
    upstream: str       # the component, the bug or behaviour (its message, its issue)
    guard: tuple[str, ...]  # pytest node ids or lit files, from the repository root
    remove_when: str
    where: str = ""     # module (and function) implementing it; filled in by all_workarounds
    unguarded: str = ""  # with no guard: why no test shows the upstream failure

    def __post_init__(self):
        if self.stage not in WORKAROUND_STAGES:
            raise ValueError(f"workaround {self.name!r}: stage {self.stage!r} is not one of "
                             f"{', '.join(WORKAROUND_STAGES)}")
        if isinstance(self.guard, str):
            object.__setattr__(self, "guard", (self.guard,))
        if not self.guard and not self.unguarded:
            raise ValueError(f"workaround {self.name!r}: no guard, and no word on why")


_DETAIL = "  "
_DESCRIPTION_CHARS = 72
_TICK_SECONDS = 0.5


class LinePrinter:
    """Each message on a line of its own, after the seconds since the first."""

    def __init__(self, prefix: str = "anyshape", stream: TextIO | None = None):
        self.prefix, self.stream = prefix, stream
        self.started = time.monotonic()

    def __call__(self, message: str) -> None:
        print(f"[{self.prefix} {time.monotonic() - self.started:6.1f}s] {message}",
              file=self.stream or sys.stderr, flush=True)

    def finish(self, message: str) -> None:
        self(message)


class StageBars:
    """A tqdm line per stage, its clock kept running by a thread while the
    stage does (tqdm redraws a line only when it is updated)."""

    def __init__(self, stream: TextIO | None = None):
        from tqdm import tqdm

        self._tqdm, self.stream = tqdm, stream
        self._bar = None
        self._lock = threading.Lock()
        self._ticking = threading.Event()
        self._ticker: threading.Thread | None = None

    def __call__(self, message: str) -> None:
        with self._lock:
            if message.startswith(_DETAIL):
                self._tqdm.write(message, file=self._stream())
                return
            self._close()
            # The size asked once: a terminal that reports 0 by 0 (a
            # pseudo-terminal nobody sized) gets 80 by 24; tqdm would draw
            # nothing there (its bars below the last row are hidden).
            size = shutil.get_terminal_size()
            self._bar = self._tqdm(total=None, desc=_shortened(message.strip()),
                                   bar_format="{desc}  {elapsed}", file=self._stream(),
                                   leave=True, ncols=size.columns, nrows=size.lines)
        self._start_ticking()

    def finish(self, message: str) -> None:
        """Close the running stage's line and print ``message`` under it."""
        self.close()
        self._tqdm.write(message, file=self._stream())

    def close(self) -> None:
        """Close the running stage's line (a failed compile leaves one open)."""
        with self._lock:
            self._close()
            self._ticking.clear()

    def _stream(self) -> TextIO:
        return self.stream or sys.stderr

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _start_ticking(self) -> None:
        self._ticking.set()
        if self._ticker is None or not self._ticker.is_alive():
            self._ticker = threading.Thread(target=self._tick, name="anyshape-progress",
                                            daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while self._ticking.is_set():
            time.sleep(_TICK_SECONDS)
            with self._lock:
                if self._bar is not None:
                    self._bar.refresh()


def _shortened(text: str) -> str:
    return text if len(text) <= _DESCRIPTION_CHARS else text[:_DESCRIPTION_CHARS - 3] + "..."


def _silent(message: str) -> None:
    pass


def progress_printer(progress, prefix: str = "anyshape",
                     stream: TextIO | None = None) -> Callable[[str], None]:
    """``progress`` (as ``anyshape.compile`` takes it) as a function of a
    message; a function given is returned as it is, so that the stages of one
    compile share one clock."""
    if callable(progress):
        return progress
    if progress is False or progress is None:
        return _silent
    if progress is True:
        progress = "bars" if on_terminal(stream) else "lines"
    if progress == "bars":
        return StageBars(stream)
    if progress == "lines":
        return LinePrinter(prefix, stream)
    raise ValueError(f"progress: expected True, False, 'bars', 'lines' or a function of a "
                     f"message, got {progress!r}")


def on_terminal(stream: TextIO | None = None) -> bool:
    isatty = getattr(stream or sys.stderr, "isatty", None)
    return bool(isatty and isatty())


def close_progress(report: Callable[[str], None]) -> None:
    """Close the line of the stage ``report`` shows running, if any."""
    closing = getattr(report, "close", None)
    if closing is not None:
        closing()


def finish_progress(report: Callable[[str], None], message: str) -> None:
    """``message`` as the last of a run of stages: a bar's line is closed first."""
    getattr(report, "finish", report)(message)
