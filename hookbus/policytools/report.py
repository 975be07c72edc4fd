"""What a policy test run found: a line per failing case and a summary, JSON, or JUnit XML.

The text is a test runner's: each failing case on a line with where it is written, what was
expected and what came back, and which handler decided; then the policies that have no tests,
and one summary line. :meth:`TestReport.to_json` is the same as one object, and
:meth:`TestReport.to_junit` the JUnit XML that CI systems read (a ``testsuite`` per test
file, a ``testcase`` per case, a ``failure`` or ``error`` with the message).
"""

from __future__ import annotations

import dataclasses
from typing import Any
from xml.etree import ElementTree

from hookbus.policytools.runner import CaseResult


@dataclasses.dataclass
class TestReport:
    """Every case's result, in the order they ran."""

    results: list[CaseResult] = dataclasses.field(default_factory=list)
    #: Policy files found next to the tests that no test file tests.
    untested: list[str] = dataclasses.field(default_factory=list)
    elapsed_s: float = 0.0

    __test__ = False  # not a pytest class

    @property
    def failed(self) -> list[CaseResult]:
        return [r for r in self.results if not r.passed]

    @property
    def ok(self) -> bool:
        return bool(self.results) and not self.failed

    def summary(self) -> str:
        if not self.results:
            return "no test cases found"
        failed, errors = len([r for r in self.failed if not r.error]), len([r for r in self.results if r.error])
        passed = len(self.results) - failed - errors
        files = len({r.source for r in self.results})
        parts = (
            [f"{passed} passed"] + ([f"{failed} failed"] if failed else []) + ([f"{errors} errors"] if errors else [])
        )
        return f"{', '.join(parts)} ({len(self.results)} cases in {files} files, {self.elapsed_s:.2f}s)"

    def to_text(self) -> str:
        lines = [failure_line(result) for result in self.failed]
        lines += [f"{path}: no tests" for path in self.untested]
        lines.append(self.summary())
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": len(self.results) - len(self.failed),
            "failed": len(self.failed),
            "elapsed_s": round(self.elapsed_s, 3),
            "untested": self.untested,
            "cases": [_case_json(result) for result in self.results],
        }

    def to_junit(self) -> bytes:
        root = ElementTree.Element("testsuites", name="hookbus policy test")
        by_file: dict[str, list[CaseResult]] = {}
        for result in self.results:
            by_file.setdefault(result.source, []).append(result)
        totals = {"tests": 0, "failures": 0, "errors": 0}
        for source, results in by_file.items():
            failures = sum(1 for r in results if r.failures and not r.error)
            errors = sum(1 for r in results if r.error)
            suite = ElementTree.SubElement(
                root,
                "testsuite",
                name=source,
                tests=str(len(results)),
                failures=str(failures),
                errors=str(errors),
                time=f"{sum(r.duration_s for r in results):.6f}",
            )
            totals["tests"] += len(results)
            totals["failures"] += failures
            totals["errors"] += errors
            for result in results:
                case = ElementTree.SubElement(
                    suite, "testcase", classname=source, name=result.name, time=f"{result.duration_s:.6f}"
                )
                if result.line is not None:
                    case.set("line", str(result.line))
                if result.error:
                    ElementTree.SubElement(case, "error", message=result.error).text = failure_line(result)
                elif result.failures:
                    message = "; ".join(result.failures)
                    ElementTree.SubElement(case, "failure", message=message).text = failure_line(result)
        for key, value in totals.items():
            root.set(key, str(value))
        root.set("time", f"{self.elapsed_s:.6f}")
        written: bytes = ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
        return written + b"\n"


def failure_line(result: CaseResult) -> str:
    """``FAIL file:line name: expected ..., got ... (decided by ...)``."""
    if result.error:
        return f"ERROR {result.where} {result.name}: {result.error}"
    decided = f"decided by {', '.join(result.decided_by)}" if result.decided_by else "no handler decided"
    not_run = f"; not run: {', '.join(result.not_run)}" if result.not_run else ""
    return f"FAIL {result.where} {result.name}: {'; '.join(result.failures)} ({decided}{not_run})"


def _case_json(result: CaseResult) -> dict[str, Any]:
    return {
        "name": result.name,
        "file": result.source,
        "line": result.line,
        "passed": result.passed,
        "decision": result.decision,
        "reason": result.reason,
        "decided_by": result.decided_by,
        "not_run": result.not_run,
        "failures": result.failures,
        "error": result.error,
        "output": result.output,
        "duration_s": round(result.duration_s, 6),
    }


__all__ = ["TestReport", "failure_line"]
