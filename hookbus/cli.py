"""The ``hookbus`` command line (reference: docs/cli.md, generated from these parsers).

Only the standard library is imported at module level: ``hookbus hook`` runs on every tool
call and must start as fast as a bare Python.
"""

from __future__ import annotations

import sys

from hookbus.approvals_args import add_approvals_arguments  # the standard library only, like this module
from hookbus.audit.follow_args import follow_delivery  # the standard library only, like this module
from hookbus.audit.verify_args import verify_arguments  # the standard library only, like this module
from hookbus.freeze_args import add_freeze_arguments  # the standard library only, like this module
from hookbus.shim import AGENTS as SHIM_AGENTS  # the standard library only, like this module

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds on every hook
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence


#: Every agent a record can name: the dialects (this module may import only the standard library).
RECORDED_AGENTS = (*SHIM_AGENTS, "sdk")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", action="append", metavar="FILE", help="policy file (repeat to layer several)")
    parser.add_argument("--redis-url", metavar="URL", help="Redis URL (default: $HOOKBUS_REDIS_URL)")
    parser.add_argument(
        "--redis-cluster",
        action="store_true",
        default=None,
        help="the Redis URL is a seed node of a Redis Cluster (as HOOKBUS_REDIS_CLUSTER=1)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="log lines as text or as one JSON object each (default $HOOKBUS_LOG_FORMAT or text)",
    )


def _bind(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        help="address to bind (default $HOOKBUS_HOST or 127.0.0.1); a non-loopback "
        "address needs tokens (HOOKBUS_TOKENS) or --insecure",
    )
    parser.add_argument("--port", type=int, help="port to bind (default $HOOKBUS_PORT or 8787)")
    parser.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="allow a non-loopback bind with no tokens, as HOOKBUS_INSECURE=1 does (anyone who "
        "reaches it may post events)",
    )


def _state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="state folder of 'hookbus up': lock, state file, embedded Redis, metrics "
        "(default $HOOKBUS_STATE_DIR or .hookbus); one platform per folder",
    )


def build_parser() -> argparse.ArgumentParser:
    import argparse

    from hookbus.install.command import add_install_arguments
    from hookbus.tenancy_args import add_policy_arguments, add_tokens_arguments

    parser = argparse.ArgumentParser(prog="hookbus", description="A central hook platform for coding agents.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="run the whole platform in the foreground")
    _common(up)
    _bind(up)
    up.add_argument("--dispatchers", type=int, default=1, metavar="N", help="dispatcher processes (default 1)")
    _state_dir(up)
    up.add_argument(
        "--restart-limit",
        type=int,
        default=5,
        metavar="N",
        help="restarts of one crashed role within 60 s before everything stops (default 5)",
    )

    gw = sub.add_parser("gateway", help="run the HTTP gateway only")
    _common(gw)
    _bind(gw)

    for role, what in (("dispatcher", "run one dispatcher only"), ("worker", "run the async (arq) worker only")):
        parser_ = sub.add_parser(role, help=what)
        _common(parser_)
        parser_.add_argument(
            "--metrics-port",
            type=int,
            metavar="PORT",
            help="serve /metrics and /healthz on this port ($HOOKBUS_METRICS_TOKEN guards /metrics)",
        )
        parser_.add_argument(
            "--metrics-host",
            metavar="HOST",
            help="address for --metrics-port (default $HOOKBUS_METRICS_HOST or 127.0.0.1)",
        )
        if role == "dispatcher":
            parser_.add_argument(
                "--partitions",
                metavar="LIST",
                help="consume only these partitions, like 0-3,6 (default "
                "$HOOKBUS_DISPATCH_PARTITIONS, else all of them)",
            )

    status = sub.add_parser("status", help="show what 'hookbus up' runs from a state folder")
    _state_dir(status)
    stop = sub.add_parser("stop", help="stop the 'hookbus up' that runs from a state folder")
    _state_dir(stop)
    stop.add_argument(
        "--timeout", type=float, default=60.0, metavar="S", help="seconds to wait for everything to stop (default 60)"
    )

    hook = sub.add_parser("hook", help="agent-side shim: stdin hook input -> gateway -> Claude Code output")
    hook.add_argument("--url", help="gateway URL (default $HOOKBUS_URL or http://127.0.0.1:8787)")
    hook.add_argument("--timeout", type=float, default=5.0, metavar="S", help="seconds to wait (default 5)")
    hook.add_argument("--fail-closed", action="store_true", help="exit 2 when the gateway cannot answer")
    hook.add_argument(
        "--agent",
        type=str.lower,
        choices=SHIM_AGENTS,
        default="claude",
        help="speak this agent's hook conventions (its dialect on the gateway; default claude)",
    )

    emit = sub.add_parser("emit", help="send one event by hand and print the decision")
    emit.add_argument("event", metavar="EVENT")
    emit.add_argument("--tool", help="tool_name (PreToolUse and friends)")
    emit.add_argument("--input", metavar="JSON", help="tool_input as JSON, or extra input fields for other events")
    emit.add_argument("--session", default="hookbus-emit", metavar="ID", help="session_id")
    emit.add_argument("--url", help="gateway URL (default $HOOKBUS_URL or http://127.0.0.1:8787)")
    emit.add_argument("--timeout", type=float, default=10.0, metavar="S")

    policy = sub.add_parser("policy", help="policy file tools")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    check = policy_sub.add_parser("check", help="validate policy files; exit 1 with line-precise errors")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument(
        "--strict",
        action="store_true",
        help="notes (ignored keys, ...) and warnings (what an agent of the fleet cannot carry out) are errors too",
    )
    replay = policy_sub.add_parser("replay", help="what a candidate policy would have decided on recorded events")
    replay.add_argument("candidate", nargs="+", metavar="CANDIDATE", help="candidate policy file(s), layered in order")
    replay.add_argument(
        "--since",
        metavar="T",
        help="start of the window: now, 15m, 2h, 7d (ago), epoch s/ms or ISO 8601 (default: the start of the log)",
    )
    replay.add_argument("--until", metavar="T", help="end of the window (default: now)")
    replay.add_argument("--tenant", action="append", metavar="T", help="only this tenant (repeat or comma-separate)")
    replay.add_argument("--json", action="store_true", help="the report as one JSON object")
    replay.add_argument(
        "--run-handlers",
        action="store_true",
        help="run command/http/prompt/agent/mcp_tool handlers too (commands in a sandbox: a temp "
        "working directory, a fixed environment); without it they count as no opinion",
    )
    replay.add_argument("--limit", type=int, metavar="N", help="replay at most N records (default 100000)")
    replay.add_argument(
        "--budget",
        type=float,
        metavar="S",
        help="stop after S seconds: the report says it is partial and how many records it read (default: no limit)",
    )
    replay.add_argument("--fail-on-change", action="store_true", help="exit 3 when any decision changes")
    replay.add_argument("--trusted-module", action="append", metavar="M", help=argparse.SUPPRESS)
    replay.add_argument(
        "--redis-url",
        metavar="URL",
        help="Redis URL (default: $HOOKBUS_REDIS_URL, else the Redis of the 'hookbus up' running from --state-dir)",
    )
    _state_dir(replay)
    replay.add_argument("--key-prefix", metavar="PREFIX", help="key prefix (default $HOOKBUS_KEY_PREFIX or hookbus:)")
    _policy_tools(policy_sub)

    add_policy_arguments(policy_sub, _log_source)
    add_tokens_arguments(sub.add_parser("tokens", help="bearer tokens in Redis: create, list, revoke"), _log_source)

    add_install_arguments(sub.add_parser("install", help="connect an agent to hookbus (writes its hook settings)"))

    tail = sub.add_parser("tail", help="follow the live decision log")
    tail.add_argument(
        "--redis-url",
        metavar="URL",
        help="Redis URL (default: $HOOKBUS_REDIS_URL, else the Redis of the 'hookbus up' running from --state-dir)",
    )
    _state_dir(tail)
    tail.add_argument("--key-prefix", metavar="PREFIX", help="key prefix (default $HOOKBUS_KEY_PREFIX or hookbus:)")
    tail.add_argument("--json", action="store_true", help="one JSON object per line")
    tail.add_argument("--from-start", action="store_true", help="print the retained log first")
    tail.add_argument("--count", type=int, metavar="N", help="stop after N records (that pass the filters)")
    for flag, what in (
        ("session", "session id (or its start)"),
        ("tenant", "tenant"),
        ("event", "event name"),
        ("decision", "decision (allow, deny, ...) or outcome (decided, recorded, fail-open)"),
        ("agent", f"agent ({', '.join(RECORDED_AGENTS)})"),
    ):
        tail.add_argument(
            f"--{flag}",
            action="append",
            metavar=flag.upper(),
            help=f"only records of this {what}; repeat or comma-separate for several",
        )
    _audit(sub.add_parser("audit", help="the decision log as an audit trail: export a window, feed a pipeline"))
    _dlq(sub.add_parser("dlq", help="async hooks that were given up: list, show, replay, purge"))
    add_freeze_arguments(sub)
    add_approvals_arguments(sub, _log_source)
    _tag_commands(parser)
    return parser


def _policy_tools(policy_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    test = policy_sub.add_parser("test", help="run policy test files; exit 1 when a case fails")
    test.add_argument("paths", nargs="*", metavar="PATH", help="test files (*_test.yaml) or folders (default .)")
    test.add_argument("--policy", action="append", metavar="FILE", help="test this policy (repeat to layer several)")
    test.add_argument("--json", action="store_true", help="the results as one JSON object")
    test.add_argument("--junit", metavar="FILE", help="also write the results as JUnit XML to FILE")
    test.add_argument("--run", metavar="CASE", help="only the cases whose name contains CASE")
    test.add_argument(
        "--run-handlers",
        action="store_true",
        help="run command/http/prompt/agent/mcp_tool handlers that no stub answers (commands in a "
        "sandbox, as policy replay does); without it they count as no opinion",
    )
    lint = policy_sub.add_parser("lint", help="rules that never decide and other mistakes; exit 1 on errors")
    lint.add_argument("files", nargs="+", metavar="FILE", help="policy files, layered in order")
    lint.add_argument("--strict", action="store_true", help="warnings count as errors too")
    lint.add_argument("--json", action="store_true", help="the findings as one JSON array")
    coverage = policy_sub.add_parser("coverage", help="which handlers and rules decided the logged traffic")
    coverage.add_argument(
        "--policy", action="append", metavar="FILE", help="the policy, layered in order (default $HOOKBUS_CONFIG)"
    )
    coverage.add_argument(
        "--since",
        default="7d",
        metavar="T",
        help="start of the window: 15m, 2h, 7d (ago), epoch or ISO 8601 (default 7d)",
    )
    coverage.add_argument("--until", metavar="T", help="end of the window (default: now)")
    coverage.add_argument("--tenant", action="append", metavar="T", help="only this tenant (repeat or comma-separate)")
    coverage.add_argument("--json", action="store_true", help="the report as one JSON object")
    coverage.add_argument(
        "--budget",
        type=float,
        metavar="S",
        help="stop after S seconds: the report says it is partial and how many records it read (default: no limit)",
    )
    _log_source(coverage)


def _log_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--redis-url",
        metavar="URL",
        help="Redis URL (default: $HOOKBUS_REDIS_URL, else the Redis of the 'hookbus up' running from --state-dir)",
    )
    _state_dir(parser)
    parser.add_argument("--key-prefix", metavar="PREFIX", help="key prefix (default $HOOKBUS_KEY_PREFIX or hookbus:)")


def _audit(audit: argparse.ArgumentParser) -> None:
    actions = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    export = actions.add_parser("export", help="write the records of a time window (JSON Lines, CSV, OCSF) to stdout")
    _log_source(export)
    export.add_argument(
        "--since",
        metavar="T",
        help="start of the window: now, 15m, 2h, 7d (ago), epoch s/ms or ISO 8601 (default: the oldest record)",
    )
    export.add_argument("--until", metavar="T", help="end of the window, inclusive (default: the newest record)")
    export.add_argument(
        "--format",
        choices=("jsonl", "csv", "ocsf"),
        default="jsonl",
        help="output format (default jsonl; ocsf: OCSF JSON Lines)",
    )
    for flag, what in (
        ("tenant", "tenant"),
        ("session", "session id (or its start)"),
        ("event", "event name"),
        ("decision", "decision (allow, deny, ...) or outcome (decided, recorded, fail-open)"),
        ("agent", f"agent ({', '.join(RECORDED_AGENTS)})"),
    ):
        export.add_argument(
            f"--{flag}",
            action="append",
            metavar=flag.upper(),
            help=f"only records of this {what}; repeat or comma-separate for several",
        )
    verify = actions.add_parser(
        "verify", help="check the hash chains: name the first record altered, deleted or reordered"
    )
    _log_source(verify)
    verify_arguments(verify)
    follow = actions.add_parser("follow", help="deliver every record to a sink as a durable consumer group")
    _log_source(follow)
    follow.add_argument(
        "--group",
        required=True,
        metavar="NAME",
        help="the consumer group: one per pipeline; it resumes where it stopped",
    )
    follow.add_argument(
        "--sink",
        required=True,
        metavar="SINK",
        help="jsonl:PATH (- for stdout), http:URL (Standard Webhooks) or otlp:URL (OTLP/HTTP logs, "
        "like otlp:http://127.0.0.1:4318)",
    )
    follow.add_argument(
        "--secret-env",
        metavar="VAR",
        help="sign webhooks (Standard Webhooks) with the whsec_ secret in this environment variable",
    )
    follow.add_argument(
        "--allow-network",
        action="append",
        metavar="CIDR",
        help="let the http sink reach this network despite the SSRF guard (repeat)",
    )
    follow.add_argument("--consumer", default="follower", metavar="NAME", help="consumer name (default follower)")
    follow.add_argument(
        "--format", choices=("jsonl", "ocsf"), default="jsonl", help="record format (default jsonl; ocsf: OCSF events)"
    )
    follow.add_argument(
        "--start",
        choices=("oldest", "now"),
        default="oldest",
        help="where a new group starts: the oldest record kept (default) or the next one",
    )
    follow.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per request (default 10)")
    follow.add_argument(
        "--claim-idle",
        type=float,
        default=60.0,
        metavar="S",
        help="take over records another consumer of the group left pending this long (default 60)",
    )
    follow_delivery(follow, RECORDED_AGENTS)
    from hookbus.audit.archive_args import add_archive_commands

    add_archive_commands(actions, _log_source)


def _dlq_filters(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--tenant", action="append", metavar="T", help=f"{what} of this tenant (repeat or comma-separate)"
    )
    parser.add_argument(
        "--handler",
        action="append",
        metavar="H",
        help=f"{what} of this handler: its id (or the start of it) or its type",
    )
    parser.add_argument(
        "--since", metavar="T", help=f"{what} given up since: now, 15m, 2h, 7d (ago), epoch s/ms or ISO 8601"
    )


def _queue_source(parser: argparse.ArgumentParser) -> None:
    _log_source(parser)
    parser.add_argument(
        "--queue-redis-url",
        metavar="URL",
        help="the async queue's own Redis, where the dead letters are (default: "
        "$HOOKBUS_QUEUE_REDIS_URL, else the bus's Redis); redis://... or redis+sentinel://...",
    )


def _dlq(dlq: argparse.ArgumentParser) -> None:
    actions = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="one line per dead letter, oldest first")
    _queue_source(listing)
    _dlq_filters(listing, "only letters")
    listing.add_argument("--limit", type=int, metavar="N", help="show at most N")
    listing.add_argument("--json", action="store_true", help="one JSON object per line (as 'show' prints them)")
    show = actions.add_parser("show", help="one dead letter as JSON: the event (masked), the handler, every try")
    _queue_source(show)
    show.add_argument("id", metavar="ID")
    replay = actions.add_parser("replay", help="queue dead letters again (fresh tries, the same webhook-id)")
    _queue_source(replay)
    replay.add_argument("ids", nargs="*", metavar="ID")
    replay.add_argument("--all", action="store_true", help="every dead letter (narrowed by the filters below)")
    _dlq_filters(replay, "with --all: only letters")
    purge = actions.add_parser("purge", help="delete dead letters for good (all of them without IDs)")
    _queue_source(purge)
    purge.add_argument("ids", nargs="*", metavar="ID")
    purge.add_argument("--yes", action="store_true", help="really delete")


def _tag_commands(parser: argparse.ArgumentParser) -> None:
    """Let each (sub-)command's parser put itself in the namespace it parses (the deepest wins)."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                command.set_defaults(parser_of_command=command)
                _tag_commands(command)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["hook"]:
        # The hot path: no argparse, no hookbus.commands; hookbus.shim parses its three flags itself
        # and hands anything else (--help, mistakes) back to argparse below.
        from hookbus.shim import main as hook_main

        code = hook_main(arguments[1:])
        if code is not None:
            return code
    parser = build_parser()
    args, extra = parser.parse_known_args(arguments)
    if extra:  # named by the sub-command they were given to, with its usage, not the top level's
        getattr(args, "parser_of_command", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "hook":
        from hookbus.shim import run_hook

        return run_hook(args.url, args.timeout, args.fail_closed, agent=args.agent)
    from hookbus.commands import run_command_line

    return run_command_line(args)


if __name__ == "__main__":
    sys.exit(main())
