"""The table of a run: ``python -m opinfo.summary results.jsonl`` (Markdown).

The results file holds a ``{"run": ...}`` line (the command, the not-applicable
samples), one record a case, and a ``{"done": ...}`` line (the wall time).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict

from opinfo.classify import CRASH, EXPORT, IREE, OURS, TIMEOUT, TORCH_MLIR, across_stacks

CAUSES = (OURS, EXPORT, TORCH_MLIR, IREE, CRASH, TIMEOUT)


def read(path) -> tuple[dict, list[dict], dict]:
    run, records, done = {}, [], {}
    with open(path) as f:
        for line in f:
            item = json.loads(line)
            if "run" in item:
                run = item["run"]
            elif "done" in item:
                done = item["done"]
            else:
                records.append(across_stacks(item))
    return run, records, done


def passed(record: dict, stack: str) -> bool:
    return record.get(stack, {}).get("status") == "pass"


def ran(records: list[dict]) -> list[dict]:
    return [r for r in records if "na" not in r and "harness_error" not in r]


def target_failures(records: list[dict]) -> list[dict]:
    """The floor's target, to be empty: plain passes and anyshape does not."""
    return [r for r in ran(records) if passed(r, "plain") and not passed(r, "anyshape")]


def wrong_answers(records: list[dict]) -> list[dict]:
    return [r for r in ran(records) if r.get("anyshape", {}).get("stage") == "numerics"]


def unclear(records: list[dict]) -> list[dict]:
    """anyshape failures a user would not understand: neither a CompileError
    nor a ValueError/TypeError with a message. Export refusals are
    torch.export's own errors, the same on both stacks, and counted apart."""
    return [r for r in ran(records) if r.get("anyshape", {}).get("status") == "fail"
            and r["anyshape"].get("stage") != "numerics" and not r["anyshape"].get("clear")]


def _shape(text: str) -> str:
    """An error message with what varies between cases blanked, to group by."""
    text = re.sub(r"/tmp/\S+", "<path>", text)
    text = re.sub(r"got an? \w+ \(a pytree node", "got a <type> (a pytree node", text)
    text = re.sub(r"\b(s|u|ps)\d+\b", "<sym>", text)
    text = re.sub(r"%[\w.#]+", "%<v>", text)
    text = re.sub(r"\d+", "N", text)
    return text[:110]


def repro(record: dict) -> str:
    return record.get("sample") or record["case"]


def _groups(failures: list[tuple[dict, dict]]) -> list[tuple[tuple, list]]:
    groups = defaultdict(list)
    for record, result in failures:
        groups[(result.get("cause"), result.get("stage"), _shape(result.get("error", "")))].append(
            (record, result))
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def _case_lines(records: list[dict], stack: str = "anyshape") -> list[str]:
    lines = []
    for (cause, stage, _), members in _groups([(r, r[stack]) for r in records]):
        record, result = members[0]
        others = ", ".join(m[0]["case"] for m in members[1:6]) + (" ..." if len(members) > 6 else "")
        lines.append(f"- **{cause} / {stage}** ({len(members)}): `{record['case']}` "
                     f"`{repro(record)}`: {result.get('error', '')}"
                     + (f"; also {others}" if others else ""))
    return lines


def summarize(run: dict, records: list[dict], done: dict, examples: int = 2,
              top: int = 25) -> str:
    cases = ran(records)
    out = ["# OpInfo floor", ""]
    if run.get("command"):
        out += [f"Command: `{run['command']}`", ""]
    na = Counter(reason for _, reason in run.get("not_applicable", []))
    na.update(r["na"] for r in records if "na" in r)
    harness = [r for r in records if "harness_error" in r]
    seconds = done.get("wall_seconds")
    out += ["| | anyshape | plain stack |", "| --- | --- | --- |",
            f"| cases run | {len(cases)} | {len(cases)} |"]
    for label, test in (("pass", lambda r: r.get("status") == "pass"),
                        ("export-fail (torch.export refused)", lambda r: r.get("status") == "export-fail")):
        out.append(f"| {label} | " + " | ".join(
            str(sum(test(r.get(s, {})) for r in cases)) for s in ("anyshape", "plain")) + " |")
    for cause in CAUSES:
        counts = [sum(r.get(s, {}).get("status") == "fail" and r[s].get("cause") == cause
                      for r in cases) for s in ("anyshape", "plain")]
        out.append(f"| fail: {cause} | {counts[0]} | {counts[1]} |")
    target, wrong, vague = target_failures(records), wrong_answers(records), unclear(records)
    out += ["", f"- plain passes, anyshape fails: **{len(target)}**",
            f"- anyshape wrong answers: {len(wrong)} "
            f"({sum(r['anyshape']['cause'] == OURS for r in wrong)} where the plain stack is right "
            f"or did not run)",
            f"- anyshape unclear errors (not CompileError/ValueError/TypeError; export "
            f"refusals aside): {len(vague)}",
            f"- not applicable: {sum(na.values())} samples ("
            + ", ".join(f"{reason}: {n}" for reason, n in na.most_common()) + ")",
            f"- harness errors: {len(harness)}"]
    if seconds:
        out.append(f"- wall time: {seconds:.0f} s, {seconds / max(len(records), 1):.2f} s per case "
                   f"({run.get('workers', '?')} workers)")
    for title, chosen in (("Plain passes, anyshape fails", target),
                          ("anyshape wrong answers", wrong),
                          ("anyshape unclear errors", vague)):
        if chosen:
            out += ["", f"## {title}", ""] + _case_lines(chosen)
    for stack in ("anyshape", "plain"):
        failures = [(r, r[stack]) for r in cases if r.get(stack, {}).get("status") == "fail"]
        out += ["", f"## {stack} failures by cause (top {top} groups)", ""]
        by_cause = Counter(result["cause"] for _, result in failures)
        out.append(", ".join(f"{cause}: {n}" for cause, n in by_cause.most_common()))
        out.append("")
        for (cause, stage, _), members in _groups(failures)[:top]:
            shown = "; ".join(f"`{m[0]['case']}`: {m[1].get('error', '')[:160]}"
                              for m in members[:examples])
            out.append(f"- {cause} / {stage} ({len(members)}): {shown}")
    exports = [r for r in cases if r.get("plain", {}).get("status") == "export-fail"]
    if exports:
        out += ["", "## torch.export refusals (top groups)", ""]
        for (_, _, _), members in _groups([(r, r["plain"]) for r in exports])[:10]:
            out.append(f"- ({len(members)}) `{members[0][0]['case']}`: "
                       f"{members[0][1].get('error', '')[:160]}")
    if harness:
        out += ["", "## harness errors", ""] + [f"- `{r['case']}`: "
                                               f"{r['harness_error'].splitlines()[-1]}" for r in harness]
    return "\n".join(out) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", help="the JSONL file bench/coverage.py wrote")
    parser.add_argument("--top", type=int, default=25, help="failure groups shown per stack")
    args = parser.parse_args(argv)
    print(summarize(*read(args.results), top=args.top), end="")


if __name__ == "__main__":
    main()
