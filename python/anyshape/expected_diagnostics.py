"""``anyshape-opt --verify-diagnostics``: the diagnostics a file expects, checked as
upstream mlir-opt checks them.

A comment ``// expected-error {{text}}`` expects an error on its own line whose
message contains ``text``; ``expected-warning``, ``expected-remark`` and
``expected-note`` likewise. ``@+N`` / ``@-N`` move the expected line by N,
``@above`` / ``@below`` to the line before / after. Every diagnostic produced
must be expected and every expectation met; otherwise each mismatch is
reported at its line and the run fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DIRECTIVE = re.compile(r"expected-(error|warning|remark|note)"
                        r"(?:@(above|below|[+-]\d+))?\s*\{\{(.*?)\}\}")
_LINE = re.compile(r'"[^"]*":(\d+):\d+')


@dataclass
class Expected:
    severity: str
    line: int
    text: str
    matched: bool = False


@dataclass
class Produced:
    severity: str        # error, warning, remark, note
    line: int | None     # None: no file location
    message: str


def parse_expected(text: str) -> list[Expected]:
    """The expectations in ``text`` (line numbers 1-based, as in ``text``)."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in _DIRECTIVE.finditer(line):
            severity, where, expected = match.groups()
            target = number
            if where == "above":
                target = number - 1
            elif where == "below":
                target = number + 1
            elif where:
                target = number + int(where)
            out.append(Expected(severity, target, expected))
    return out


def produced_from(diagnostic) -> list[Produced]:
    """A diagnostic of the MLIR bindings and its notes."""
    out = [Produced(_severity(diagnostic.severity), _line(diagnostic.location),
                    diagnostic.message)]
    for note in diagnostic.notes:
        out += produced_from(note)
    return out


def mismatches(expected: list[Expected], produced: list[Produced], filename: str) -> list[str]:
    """Error lines for diagnostics nobody expected and expectations nothing met."""
    errors = []
    for diagnostic in produced:
        match = next((e for e in expected if not e.matched and e.severity == diagnostic.severity
                      and e.line == diagnostic.line and e.text in diagnostic.message), None)
        if match is None:
            where = f"{filename}:{diagnostic.line}" if diagnostic.line else filename
            errors.append(f"{where}: error: unexpected {diagnostic.severity}: "
                          f"{diagnostic.message}")
        else:
            match.matched = True
    for expectation in expected:
        if not expectation.matched:
            errors.append(f"{filename}:{expectation.line}: error: expected {expectation.severity} "
                          f"\"{expectation.text}\" was not produced")
    return errors


def _severity(severity) -> str:
    return str(severity).rsplit(".", 1)[-1].lower()


def _line(location) -> int | None:
    match = _LINE.search(str(location))
    return int(match.group(1)) if match else None
