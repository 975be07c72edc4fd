"""``hookbus policy test``, ``hookbus policy lint`` and ``hookbus policy coverage``: arguments in, exit code out."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bus.errors import ConfigError, PolicyError
from bus.hooks.plugins import clear_hooks, load_plugins
from bus.policy.loading import Policy, load_policy
from bus.runtime.settings import Settings, comma_list
from hookbus.policytools.cases import LoadedCase, Suite, discover, load_suite
from hookbus.policytools.report import TestReport
from hookbus.policytools.runner import CaseRunner


def _as_if_dispatcher() -> None:
    """Import function and plugin modules as ``hookbus up`` does, and keep out of the roles' metrics."""
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


def load_suites(paths: list[str], policy_override: list[str]) -> tuple[list[Suite], list[str]]:
    """The test files under ``paths`` and the policy files next to them that none tests."""
    test_paths, candidates = discover(paths or ["."])
    problems = []
    suites = []
    for path in test_paths:
        try:
            suites.append(load_suite(path, policy_override))
        except PolicyError as exc:
            problems += exc.problems
    if problems:
        raise PolicyError(problems)
    tested = {Path(p).resolve() for suite in suites for p in suite.policy_paths}
    untested = [str(p) for p in candidates if p.resolve() not in tested]
    if not suites and policy_override:
        untested += [p for p in policy_override if Path(p).resolve() not in tested]
    return suites, untested


async def run_suites(
    suites: list[Suite], *, run_handlers: bool = False, only: str | None = None, untested: list[str] | None = None
) -> TestReport:
    """Run every case of ``suites`` (those whose name contains ``only``, if given)."""
    report = TestReport(untested=list(untested or []))
    started = time.monotonic()
    policies: dict[tuple[str, ...], Policy] = {}
    with tempfile.TemporaryDirectory(prefix="hookbus-policy-test-") as sandbox:
        for suite in suites:
            policy = policies.get(suite.policy_paths)
            if policy is None:
                policy = policies[suite.policy_paths] = load_policy(suite.policy_paths)
            # Plugin callbacks are registered process-wide: only this policy's may answer its cases.
            clear_hooks()
            load_plugins(policy.settings.plugins)
            runner = CaseRunner(policy, run_handlers=run_handlers, sandbox=sandbox)
            cases: list[LoadedCase] = [c for c in suite.cases if only is None or only in c.case.name]
            for loaded in cases:
                report.results.append(await runner.run(loaded))
    report.elapsed_s = time.monotonic() - started
    return report


def run_policy_tests(args: argparse.Namespace) -> int:
    """``hookbus policy test``: exit 0 when every case passes, 1 on any failure or when none ran."""
    _as_if_dispatcher()
    suites, untested = load_suites(list(args.paths), list(args.policy or []))
    report = asyncio.run(run_suites(suites, run_handlers=args.run_handlers, only=args.run, untested=untested))
    if args.junit:
        try:
            Path(args.junit).write_bytes(report.to_junit())
        except OSError as exc:
            raise ConfigError(f"cannot write --junit {args.junit}: {exc}") from exc
    if args.json:
        sys.stdout.write(orjson.dumps(report.to_json()).decode() + "\n")
    else:
        print(report.to_text())
    return 0 if report.ok else 1


def lint_policy(args: argparse.Namespace) -> int:
    """``hookbus policy lint``: every finding with file, line and severity; exit 1 on an error
    (on a warning too with ``--strict``)."""
    from hookbus.policytools.lint import lint_files

    findings = lint_files(list(args.files))
    if args.json:
        sys.stdout.write(orjson.dumps([f.to_json() for f in findings]).decode() + "\n")
    else:
        for finding in findings:
            print(finding)
        errors = sum(1 for f in findings if f.severity == "error")
        print(f"{errors} errors, {len(findings) - errors} warnings in {len(args.files)} files")
    failing = [f for f in findings if f.severity == "error" or args.strict]
    return 1 if failing else 0


def coverage_policy(args: argparse.Namespace, settings: Settings, redis_url: str) -> int:
    """``hookbus policy coverage``: which handlers and rules decided the logged traffic; exit 0."""
    from bus.decisionlog.audit import Window
    from hookbus.policytools.coverage import read_coverage

    _as_if_dispatcher()
    paths = list(args.policy or settings.policy_paths or ())
    if not paths:
        raise ConfigError("no policy: pass --policy FILE (or --config, or set HOOKBUS_CONFIG)")
    policy = load_policy(paths)
    window = Window.parse(args.since, args.until)
    if args.budget is not None and not args.budget > 0:
        raise ConfigError("--budget must be a positive number of seconds")
    report = asyncio.run(
        read_coverage(policy, redis_url, settings.keys, window, tenants=comma_list(args.tenant), budget_s=args.budget)
    )
    if args.json:
        sys.stdout.write(orjson.dumps(report.to_json()).decode() + "\n")
    else:
        print(report.to_text())
    return 0


__all__ = ["coverage_policy", "lint_policy", "load_suites", "run_policy_tests", "run_suites"]
