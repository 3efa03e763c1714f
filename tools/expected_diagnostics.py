"""``anyshape-opt --verify-diagnostics``: MLIR's diagnostic verifier, as mlir-opt runs it.

A line holding ``expected-<severity>[-re] [@<where>] {{<text>}}`` (severity
``error``, ``warning``, ``remark`` or ``note``) expects a diagnostic whose
message contains ``text`` on that line; ``@+N``/``@-N`` move it N lines,
``@above``/``@below`` to the nearest line above/below that holds no
expectation, ``@unknown`` expects it at a location without a file. With
``-re`` each ``{{regex}}`` inside ``text`` is an (extended POSIX) regular
expression and the rest literal. One expectation per line (upstream's pattern
runs to the line's last ``}}``); an expectation may be met by several
diagnostics. With level ``all`` every diagnostic must be expected; with
``only-expected`` unexpected ones are ignored. Each mismatch is reported at
its place, in upstream's words. ``test/opt/verify-diagnostics*.mlir`` pins
each form against torch-mlir-opt's own verifier.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

_DIRECTIVE = re.compile(r"expected-(error|note|remark|warning)(-re)? *"
                        r"(@([+-][0-9]+|above|below|unknown))? *\{\{(.*)\}\}$")
_FILE_LINE_COL = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')

# POSIX bracket classes (ERE, as llvm::Regex reads them) in Python's syntax.
_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9", "alpha": "a-zA-Z", "blank": " \\t", "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~",
    "punct": "!-/:-@\\[-`{-~", "space": " \\t\\n\\r\\f\\v", "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


class ExpectationError(ValueError):
    """An expectation that cannot be read (a regex that does not compile)."""


@dataclass
class Expected:
    severity: str
    line: int            # expected on this line (1-based); 0 for @unknown
    source_line: int     # the line of the comment
    column: int          # of "expected-" in it, 1-based
    text: str
    regex: re.Pattern | None = None
    matched: bool = False

    def matches(self, message: str) -> bool:
        if self.regex is not None:
            return self.regex.search(message) is not None
        return self.text in message


@dataclass
class Produced:
    severity: str        # error, warning, remark, note
    file: str | None     # None: no file location
    line: int
    column: int
    message: str
    show_source: bool = True   # False for a note at its diagnostic's place (as upstream prints it)


@dataclass
class Report:
    """A verifier message, at the place upstream reports it."""
    file: str
    line: int
    column: int
    message: str
    span: int = 1        # characters marked from the column (the expectation's text)


@dataclass
class Verifier:
    """The expectations of one input buffer, and those of files diagnostics point into."""
    filename: str
    text: str
    only_expected: bool = False
    expected: dict[str, list[Expected]] = field(default_factory=dict)
    unknown: list[Expected] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    reports: list[Report] = field(default_factory=list)    # not yet taken
    failed: bool = False

    def __post_init__(self):
        self.sources[self.filename] = self.text
        self.expected[self.filename] = self._read(self.filename, self.text)

    def _read(self, filename: str, text: str) -> list[Expected]:
        found, pending_below, last_plain = [], [], 0
        lines = text.split("\n")
        for index, line in enumerate(lines):
            match = _DIRECTIVE.search(line.rstrip())
            if not match:
                for expectation in pending_below:
                    expectation.line = index + 1
                pending_below, last_plain = [], index
                continue
            severity, is_regex, _, where, body = match.groups()
            expectation = Expected(severity, index + 1, index + 1, match.start() + 1, body)
            if is_regex:
                try:
                    expectation.regex = re.compile(expectation_regex(body))
                except (re.error, ExpectationError) as error:
                    self.failed = True
                    self.reports.append(Report(filename, index + 1, match.start() + 1,
                                               f"invalid regex: {error}", len(body)))
                    continue
            if where == "unknown":
                expectation.line = 0
                self.unknown.append(expectation)
                continue
            if where == "above":
                expectation.line = last_plain + 1
            elif where == "below":
                expectation.line = len(lines)      # if it dangles
                pending_below.append(expectation)
            elif where:
                expectation.line += int(where)
            found.append(expectation)
        return found

    def _expectations_for(self, filename: str) -> list[Expected]:
        if filename not in self.expected:
            # As upstream, a diagnostic in another file reads that file's expectations.
            try:
                with open(filename) as f:
                    self.sources[filename] = f.read()
            except OSError:
                self.expected[filename] = []
            else:
                self.expected[filename] = self._read(filename, self.sources[filename])
        return self.expected[filename]

    def process(self, produced: Produced) -> None:
        candidates = self.unknown if produced.file is None else \
            self._expectations_for(produced.file)
        near_miss = None
        for expectation in candidates:
            if produced.file is not None and expectation.line != produced.line:
                continue
            if expectation.matches(produced.message):
                if expectation.severity == produced.severity:
                    expectation.matched = True
                    return
                near_miss = expectation
        if self.only_expected:
            return
        self.failed = True
        if near_miss is not None:
            self.reports.append(Report(produced.file or self.filename, near_miss.source_line,
                                       near_miss.column,
                                       f"'{produced.severity}' diagnostic emitted when "
                                       f"expecting a '{near_miss.severity}'"))
        else:
            self.reports.append(Report(produced.file or "", produced.line, produced.column,
                                       f"unexpected {produced.severity}: {produced.message}"))

    def take_reports(self) -> list[Report]:
        """The mismatches found since the last call (upstream prints them as they come)."""
        out, self.reports = self.reports, []
        return out

    def finish(self) -> list[Report]:
        """After the last diagnostic: the mismatches not yet taken, then every
        expectation nothing met."""
        out = self.take_reports()
        for filename, expectations in self.expected.items():
            out += [_unmet(filename, e) for e in expectations if not e.matched]
        # As upstream, an unmet @unknown expectation is reported without a place.
        out += [Report("", 0, 0, _unmet("", e).message) for e in self.unknown if not e.matched]
        self.failed |= bool(out)
        return out


def _unmet(filename: str, expectation: Expected) -> Report:
    return Report(filename, expectation.source_line, expectation.column,
                  f"expected {expectation.severity} \"{expectation.text}\" was not produced",
                  len(expectation.text))


def expectation_regex(body: str) -> str:
    """``-re`` text -> Python regex: literal outside ``{{...}}``, ERE inside."""
    out, rest = [], body
    while rest:
        start = rest.find("{{")
        if start < 0:
            out.append(re.escape(rest))
            break
        out.append(re.escape(rest[:start]))
        rest = rest[start + 2:]
        end = rest.find("}}")
        if end < 0:
            raise ExpectationError("found start of regex with no end '}}'")
        out.append("(" + ere_to_python(rest[:end]) + ")")
        rest = rest[end + 2:]
    return "".join(out)


def ere_to_python(pattern: str) -> str:
    """An extended POSIX regex in Python's syntax: bracket expressions take
    ``[:class:]`` names and read a backslash literally."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i:i + 2])
            i += 2
        elif ch == "[":
            j, items = i + 1, ["["]
            if j < len(pattern) and pattern[j] == "^":
                items.append("^")
                j += 1
            if j < len(pattern) and pattern[j] == "]":
                items.append("\\]")
                j += 1
            while j < len(pattern) and pattern[j] != "]":
                if pattern.startswith("[:", j):
                    end = pattern.find(":]", j + 2)
                    name = pattern[j + 2:end] if end > 0 else ""
                    if name not in _POSIX_CLASSES:
                        raise ExpectationError(f"invalid character class '{name}'")
                    items.append(_POSIX_CLASSES[name])
                    j = end + 2
                else:
                    items.append(re.escape(pattern[j]) if pattern[j] in "\\[" else pattern[j])
                    j += 1
            if j >= len(pattern):
                raise ExpectationError("brackets ([ ]) not balanced")
            out.append("".join(items) + "]")
            i = j + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def produced_from(diagnostic, drop_op_notes: bool = True) -> list[Produced]:
    """A diagnostic of the MLIR bindings and its notes, each with its file location.

    ``drop_op_notes``: leave out the "see current operation" note the context
    attaches to an op's diagnostic (mlir-opt turns it off while verifying).
    """
    file, line, column = location_parts(diagnostic.location)
    out = [Produced(_severity(diagnostic.severity), file, line, column, diagnostic.message)]
    for note in diagnostic.notes:
        if drop_op_notes and note.message.startswith("see current operation:"):
            continue
        notes = produced_from(note, drop_op_notes)
        notes[0].show_source = (notes[0].file, notes[0].line, notes[0].column) != \
            (file, line, column)
        out += notes
    return out


def location_parts(location) -> tuple[str | None, int, int]:
    """(file, line, column) of the first file location inside ``location`` (a
    callsite, fused or named one included); file None where there is none."""
    match = _FILE_LINE_COL.search(str(location))
    if not match:
        return None, 0, 0
    return match.group(1), int(match.group(2)), int(match.group(3))


def _severity(severity) -> str:
    return str(severity).rsplit(".", 1)[-1].lower()

