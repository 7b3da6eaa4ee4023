"""An eval's report: each case's pass/fail on the candidate with the assertions it failed, side
by side with the baseline's (tokens, latency, tool calls, whether and how the final answers
differ), the regression rule, and the report as a terminal table, JSON and JUnit XML.

A regression is a case that passes on the baseline and fails on the candidate; without a
baseline, any case that fails."""

from __future__ import annotations

import difflib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

from parley.runtime.evals.runner import CaseRun, Target

# Lines of a unified diff of two final answers that a report shows.
DIFF_LINES = 12


@dataclass(frozen=True, slots=True)
class CaseReport:
    name: str
    candidate: CaseRun
    baseline: CaseRun | None

    @property
    def regressed(self) -> bool:
        if self.baseline is None:
            return not self.candidate.passed
        return self.baseline.passed and not self.candidate.passed

    @property
    def answers(self) -> str | None:
        """ "same" or "differ" (None without a baseline, or when a run has no answer to compare)."""
        if self.baseline is None or self.baseline.observed is None or self.candidate.observed is None:
            return None
        same = self.baseline.observed.final_text == self.candidate.observed.final_text
        return "same" if same else "differ"

    def answer_diff(self) -> list[str]:
        """How the final answers differ: a unified diff, baseline to candidate, cut short."""
        if self.answers != "differ":
            return []
        assert self.baseline is not None and self.baseline.observed and self.candidate.observed
        before = (self.baseline.observed.final_text or "").splitlines()
        after = (self.candidate.observed.final_text or "").splitlines()
        lines = list(difflib.unified_diff(before, after, "baseline", "candidate", lineterm="", n=0))
        return lines[:DIFF_LINES] + (["…"] if len(lines) > DIFF_LINES else [])


@dataclass(frozen=True, slots=True)
class EvalReport:
    dataset: str
    candidate: Target
    baseline: Target | None
    cases: list[CaseReport]

    @classmethod
    def of(cls, dataset: str, candidate: Target, baseline: Target | None, runs: list[CaseRun]) -> EvalReport:
        mine = {r.case: r for r in runs if r.target == candidate}
        theirs = {r.case: r for r in runs if baseline is not None and r.target == baseline}
        names = list(dict.fromkeys(r.case for r in runs))
        cases = [CaseReport(name, mine[name], theirs.get(name)) for name in names]
        return cls(dataset, candidate, baseline, cases)

    @property
    def regressions(self) -> list[str]:
        return [c.name for c in self.cases if c.regressed]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0


def _run_json(run: CaseRun | None) -> dict[str, Any] | None:
    if run is None:
        return None
    seen = run.observed
    return {
        "agent": run.target.label,
        "version": run.target.version,
        "passed": run.passed,
        "failed": run.failed,
        "session_id": seen.session_id if seen else None,
        "turns": seen.turns if seen else None,
        "tokens": seen.tokens if seen else None,
        "latency_s": seen.latency_s if seen else None,
        "tool_calls": seen.tools if seen else [],
        "final_text": seen.final_text if seen else None,
        "judge": {"passed": seen.verdict.passed, "reason": seen.verdict.reason}
        if seen and seen.verdict
        else None,
    }


def _target(target: Target | None) -> dict[str, Any] | None:
    return (
        None if target is None else {"agent": target.agent, "version": target.version, "label": target.label}
    )


def as_json(report: EvalReport) -> dict[str, Any]:
    passed = sum(1 for c in report.cases if c.candidate.passed)
    return {
        "dataset": report.dataset,
        "candidate": _target(report.candidate),
        "baseline": _target(report.baseline),
        "cases": [
            {
                "name": c.name,
                "passed": c.candidate.passed,
                "regression": c.regressed,
                "candidate": _run_json(c.candidate),
                "baseline": _run_json(c.baseline),
                "answers": c.answers,
                "answer_diff": c.answer_diff(),
            }
            for c in report.cases
        ],
        "summary": {
            "cases": len(report.cases),
            "passed": passed,
            "failed": len(report.cases) - passed,
            "regressions": report.regressions,
        },
    }


def _mark(run: CaseRun | None) -> str:
    return "-" if run is None else "PASS" if run.passed else "FAIL"


def _pair(case: CaseReport, value: Any) -> str:
    """`baseline -> candidate` of one measure, or the candidate's alone."""
    mine = value(case.candidate)
    return mine if case.baseline is None else f"{value(case.baseline)} -> {mine}"


def _tokens(run: CaseRun) -> str:
    return str(run.observed.tokens) if run.observed else "-"


def _latency(run: CaseRun) -> str:
    return f"{run.observed.latency_s:.2f}s" if run.observed else "-"


def _tools(run: CaseRun) -> str:
    return ",".join(run.observed.tools) or "-" if run.observed else "-"


def render(report: EvalReport) -> str:
    """The terminal table: one row a case, its failed assertions below it."""
    header = ["case", "candidate", "baseline", "tokens", "latency", "tool calls", "answers"]
    rows = [
        [
            c.name,
            _mark(c.candidate),
            _mark(c.baseline),
            _pair(c, _tokens),
            _pair(c, _latency),
            _pair(c, _tools),
            c.answers or "-",
        ]
        for c in report.cases
    ]
    if report.baseline is None:
        header = [h for h in header if h not in ("baseline", "answers")]
        rows = [[row[0], row[1], *row[3:6]] for row in rows]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    base = f", baseline {report.baseline.label} ({report.baseline.version})" if report.baseline else ""
    lines = [
        f"parley eval {report.dataset}: candidate {report.candidate.label} ({report.candidate.version}){base}"
    ]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    for case, row in zip(report.cases, rows, strict=True):
        lines.append("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        lines += [f"    candidate: {f}" for f in case.candidate.failed]
        lines += [f"    baseline: {f}" for f in case.baseline.failed] if case.baseline else []
        lines += [f"    {d}" for d in case.answer_diff()]
    passed = sum(1 for c in report.cases if c.candidate.passed)
    regressions = report.regressions
    noun = "regression" if report.baseline else "failing case"
    lines.append(
        f"{len(report.cases)} cases: {passed} passed, {len(report.cases) - passed} failed; "
        f"{len(regressions)} {noun}{'s' if len(regressions) != 1 else ''}"
        + (f" ({', '.join(regressions)})" if regressions else "")
    )
    return "\n".join(lines)


def as_junit(report: EvalReport) -> str:
    """JUnit XML: one testcase a case. A regression (without a baseline: a failing case) is a
    failure; a case that fails on the baseline too is skipped, as it is no regression."""
    suite = ET.Element(
        "testsuite",
        name=f"parley eval {report.dataset}",
        tests=str(len(report.cases)),
        failures=str(len(report.regressions)),
        skipped=str(sum(1 for c in report.cases if not c.candidate.passed and not c.regressed)),
        time=f"{sum(c.candidate.observed.latency_s for c in report.cases if c.candidate.observed):.3f}",
    )
    for case in report.cases:
        seen = case.candidate.observed
        element = ET.SubElement(
            suite,
            "testcase",
            classname=f"parley.eval.{report.candidate.agent}",
            name=case.name,
            time=f"{seen.latency_s:.3f}" if seen else "0",
        )
        details = "\n".join(case.candidate.failed)
        if case.regressed:
            failure = ET.SubElement(element, "failure", message=case.candidate.failed[0][:500])
            failure.text = details
        elif not case.candidate.passed:
            ET.SubElement(element, "skipped", message="fails on the baseline too, so it is no regression")
        out = [f"candidate {case.candidate.target.label}: session {seen.session_id if seen else '-'}"]
        if case.baseline is not None:
            theirs = case.baseline.observed
            out.append(
                f"baseline {case.baseline.target.label}: session {theirs.session_id if theirs else '-'}"
            )
        ET.SubElement(element, "system-out").text = "\n".join(out + case.answer_diff())
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
