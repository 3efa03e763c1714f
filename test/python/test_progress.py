"""``progress=``: what a person watching a long compile sees (stages.py)."""

import io
import re
import time

import pytest

from anyshape.stages import (LinePrinter, StageBars, close_progress, finish_progress,
                             progress_printer)


class Terminal(io.StringIO):
    """stderr as a terminal: what tqdm draws, carriage returns and all."""

    def isatty(self):
        return True


def drawn_lines(text: str) -> list[str]:
    """The lines a terminal shows at the end: each carriage return redraws its line."""
    return [line.split("\r")[-1].rstrip() for line in text.split("\n") if line.split("\r")[-1]]


def test_true_draws_bars_on_a_terminal_and_prints_lines_elsewhere():
    assert isinstance(progress_printer(True, stream=Terminal()), StageBars)
    assert isinstance(progress_printer(True, stream=io.StringIO()), LinePrinter)
    assert isinstance(progress_printer("lines", stream=Terminal()), LinePrinter)
    said = []
    report = said.append
    assert progress_printer(report) is report  # nested compiles share one clock
    progress_printer(False)("nothing is shown")


def test_negative_an_unknown_style_is_refused_by_name():
    with pytest.raises(ValueError, match=r"progress: expected True, False, 'bars', 'lines' .*"
                                         r"got 'fancy'"):
        progress_printer("fancy")


def test_each_stage_keeps_a_line_with_its_time_and_its_details_above_it():
    terminal = Terminal()
    bars = progress_printer("bars", stream=terminal)
    bars("exporting the step")
    bars("  deriving the decode steps")
    bars("compiling with IREE")
    # No message meanwhile: the clock is redrawn all the same, a second on.
    # Waited for, not slept for: at 95 % of a fresh clone's make test, the
    # ticking thread was not run within 1.3 s.
    ticked = re.compile(r"compiling with IREE  00:0[1-9]")
    deadline = time.monotonic() + 20
    while not ticked.search(terminal.getvalue()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ticked.search(terminal.getvalue()), terminal.getvalue()
    finish_progress(bars, "done in 1s")
    lines = drawn_lines(terminal.getvalue())
    assert lines[0] == "  deriving the decode steps"
    assert re.fullmatch(r"exporting the step  00:00", lines[1]), lines
    assert ticked.fullmatch(lines[2]), lines
    assert lines[3] == "done in 1s"


def test_a_long_description_is_cut_to_fit():
    terminal = Terminal()
    bars = StageBars(terminal)
    bars("running " + "x" * 200)
    close_progress(bars)
    (line,) = drawn_lines(terminal.getvalue())
    assert line.startswith("running xxx") and "...  00:00" in line and len(line) < 90


def test_closing_twice_or_with_no_stage_is_harmless():
    terminal = Terminal()
    bars = StageBars(terminal)
    close_progress(bars)
    bars("  a detail before any stage starts none")
    bars("a stage")
    close_progress(bars)
    close_progress(bars)
    close_progress(print)  # a function of a message has nothing to close
    assert drawn_lines(terminal.getvalue()) == ["  a detail before any stage starts none",
                                                "a stage  00:00"]


def test_lines_share_one_clock_and_finish_is_a_line():
    stream = io.StringIO()
    lines = progress_printer("lines", prefix="anyshape-compile", stream=stream)
    lines("a stage")
    lines("  a detail")
    finish_progress(lines, "done")
    printed = stream.getvalue().splitlines()
    assert [re.sub(r"\[anyshape-compile +\d+\.\ds\] ", "", p) for p in printed] == \
        ["a stage", "  a detail", "done"]
