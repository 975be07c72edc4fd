"""The Markdown block of ``bench/cluster.py`` (for BENCHMARKS.md), from its JSON results."""

from __future__ import annotations

from typing import Any


def _loads(results: dict[str, Any]) -> str:
    start, end = results["load_average"]["start"], results["load_average"].get("end", [0, 0, 0])
    return (
        f"load average {start[0]:.2f} / {start[1]:.2f} / {start[2]:.2f} at the start, "
        f"{end[0]:.2f} / {end[1]:.2f} / {end[2]:.2f} at the end"
    )


def round_ratios(closed: dict[str, Any], name: str) -> list[float]:
    """Decisions/s of ``name`` over the single Redis's, round by round (each pair ran back to back)."""
    base = [r["decisions_per_s"] for r in closed["single"]["rounds"]]
    mine = [r["decisions_per_s"] for r in closed[name]["rounds"]]
    return [m / b for m, b in zip(mine, base, strict=False)]


def _throughput(results: dict[str, Any]) -> list[str]:
    closed = results["closed"]
    base = closed["single"]["decisions_per_s"]
    lines = [
        "| bus | decisions/s (rounds) | vs single Redis (rounds) | p50 ms | p99 ms | fail-open | "
        "gateway CPU µs/dec | dispatchers CPU µs/dec | Redis CPU µs/dec (masters; all nodes) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in closed.items():
        rounds = " / ".join(f"{r['decisions_per_s']:,.0f}" for r in row["rounds"])
        ratios = round_ratios(closed, name)
        median = sorted(ratios)[len(ratios) // 2]
        ratio = f"{row['decisions_per_s'] / base:.2f}x, median {median:.2f}x ({' / '.join(f'{x:.2f}' for x in ratios)})"
        lines.append(
            f"| {name} | **{row['decisions_per_s']:,.0f}** ({rounds}) | {ratio} | {row['p50_ms']:.2f} | "
            f"{row['p99_ms']:.1f} | {row['fail_open']} | {row['cpu_us']['gateway']:.0f} | "
            f"{row['cpu_us']['dispatcher']:.0f} | {row['redis']['cpu_us']:.0f}; "
            f"{row['cpu_us']['redis_processes']:.0f} |"
        )
    return lines


def _record_bytes(results: dict[str, Any], name: str) -> float:
    sizes = [v["bytes_per_entry"] for v in results.get("log_record", {}).get(name, {}).values() if v["entries"]]
    return sum(sizes) / len(sizes) if sizes else 0.0


def _redis_cost(results: dict[str, Any], section: str) -> list[str]:
    lines = [
        "| bus | commands/dec | EVALSHA/dec | net in B/dec | net out B/dec | replication B/dec | "
        "cluster-bus publish msgs/dec (classic; sharded) | cluster-bus B/dec | log record B |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in results[section].items():
        r = row["redis"]
        lines.append(
            f"| {name} | {r['commands']:.2f} | {r['evalsha']:.2f} | {r['net_in_bytes']:,.0f} | "
            f"{r['net_out_bytes']:,.0f} | {r['repl_out_bytes']:,.0f} | "
            f"{row['redis_all_nodes']['publish_bus']:.2f}; "
            f"{row['redis_all_nodes'].get('publishshard_bus', 0):.2f} | "
            f"{row.get('bus_bytes_per_decision', 0):,.0f} | "
            f"{_record_bytes(results, name):,.0f} |"
        )
    return lines


def _per_master(row: dict[str, Any]) -> list[str]:
    lines = [
        "| master | partitions | decisions | commands/dec | net in B/dec | net out B/dec | Redis CPU µs/dec |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in row["per_master"]:
        parts = ", ".join(str(p) for p in m["partitions"]) or "none"
        if m["decisions"]:
            lines.append(
                f"| :{m['port']} | {parts} | {m['decisions']:,} | {m['commands']:.2f} | "
                f"{m['net_in_bytes']:,.0f} | {m['net_out_bytes']:,.0f} | {m['cpu_us']:.0f} |"
            )
        else:
            lines.append(f"| :{m['port']} | {parts} | 0 | - | - | - | - |")
    return lines


def _per_node(row: dict[str, Any]) -> list[str]:
    lines = [
        "| node | role | partitions | CPU µs per decision (all decisions) | "
        "bus publish msgs received/dec (classic; sharded) | commands/dec |",
        "|---|---|---|---|---|---|",
    ]
    for node in sorted(row["per_node"], key=lambda n: (n["role"] != "master", -len(n["partitions"]), n["port"])):
        parts = ", ".join(str(p) for p in node["partitions"]) or "none"
        lines.append(
            f"| :{node['port']} | {node['role'].replace('slave', 'replica')} | {parts} | "
            f"{node['cpu_us_per_decision']:.0f} | {node['publish_received_per_decision']:.2f}; "
            f"{node.get('publishshard_received_per_decision', 0):.2f} | "
            f"{node['commands_per_decision']:.2f} |"
        )
    return lines


def _by_command(row: dict[str, Any], top: int = 12) -> str:
    items = list(row["redis"]["by_command"].items())[:top]
    return ", ".join(f"{name} {count:.2f}" for name, count in items)


def _flat(results: dict[str, Any]) -> list[str]:
    lines = [
        "| bus | decisions/s (per partition) | p50 ms | p99 ms | fail-open | gateway CPU µs/dec | "
        "dispatchers CPU µs/dec | dec/s per dispatcher core | Redis CPU µs/dec (masters) | "
        "commands/dec | net in+out B/dec |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in results["open"].items():
        rate = row["rounds"][0]["rate_per_s"]
        parts = len(row["rounds"][0]["per_partition"])
        per_core = 1e6 / row["cpu_us"]["dispatcher"] if row["cpu_us"]["dispatcher"] else 0
        r = row["redis"]
        lines.append(
            f"| {name} | {rate:g} ({rate / parts:g}) | {row['p50_ms']:.2f} | {row['p99_ms']:.1f} | "
            f"{row['fail_open']} | {row['cpu_us']['gateway']:.0f} | {row['cpu_us']['dispatcher']:.0f} | "
            f"{per_core:,.0f} | {r['cpu_us']:.0f} | {r['commands']:.2f} | "
            f"{r['net_in_bytes'] + r['net_out_bytes']:,.0f} |"
        )
    return lines


def _seconds(value: float | None) -> str:
    return f"{value:.2f} s" if value is not None else "never"


def _summary(group: dict[str, Any]) -> str:
    if not group.get("n"):
        return "none"
    return (
        f"{group['n']} requests, {group['fail_open']} fail-open, p50 {group['p50_ms']:.2f} ms, "
        f"p99 {group['p99_ms']:.1f} ms, max {group['max_ms']:.1f} ms"
    )


def _failover(fo: dict[str, Any]) -> list[str]:
    coverage = "yes (Redis's default)" if fo["cluster_require_full_coverage"] else "no"
    held = ", ".join(map(str, fo["victim_partitions"]))
    lines = [
        f"*cluster-require-full-coverage {coverage}*: master :{fo['victim_port']} (partitions {held}) killed "
        f"at {fo['killed_at_s']:.1f} s; the cluster reported replica :{fo['promoted_port']} in charge "
        f"{fo['promoted_reported_s']:.2f} s later. Partition 0 decided again "
        f"**{_seconds(fo['partition0_decides_again_s'])}** after the kill; its last fail-open answer came "
        f"{_seconds(fo['partition0_last_fail_open_s'])} after it. Node restarted (a replica again, cluster "
        f"healthy) in {fo['restart_s']:.1f} s.",
        "",
    ]
    for part, counts in fo["outcomes_by_partition"].items():
        where = " (on the killed master)" if int(part) in fo["victim_partitions"] else ""
        text = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        lines.append(f"- partition {part}{where}: {text}")
    lines += [
        f"- all requests: {_summary(fo['overall'])}",
        f"- the other masters' partitions, all requests: {_summary(fo.get('others', {}))}",
    ]
    if fo.get("outage_seconds"):
        span = f"seconds {fo['outage_seconds'][0]} to {fo['outage_seconds'][-1]}"
        lines += [
            f"- sent in the seconds with a fail-open ({span}), the killed master's partitions: "
            f"{_summary(fo['outage_victim'])}; the other partitions: {_summary(fo['outage_others'])}"
        ]
    lines += [
        "",
        "| second | requests | decided | fail-open (of which on the killed master) | errors | p99 ms | "
        "p99 ms, other partitions | max ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in fo["per_second"]:
        others = f"{s['others_p99_ms']:.1f}" if s.get("others_p99_ms") is not None else "-"
        lines.append(
            f"| {s['second']} | {s['n']} | {s['decided']} | {s['fail_open']} ({s['fail_open_victim']}) | "
            f"{s['errors']} | {s['p99_ms']:.1f} | {others} | {s['max_ms']:.1f} |"
        )
    return lines


def markdown(results: dict[str, Any]) -> str:
    args = results["args"]
    out = [
        f"{results['machine']}; {_loads(results)}; each platform 1 gateway + {args['dispatchers']} dispatchers; "
        f"PreToolUse deadline {args['deadline_s']:g} s; {args['rounds']} interleaved rounds.",
        "",
        f"**Closed loop**: {args['agents']} agents back to back, {args['closed_s']:g} s per platform in all.",
        "",
        *_throughput(results),
        "",
        "What Redis did per decision (masters; commands include the six each settle script runs inside Redis):",
        "",
        *_redis_cost(results, "closed"),
    ]
    for name, row in results["closed"].items():
        out += ["", f"{name}, commands per decision: {_by_command(row)}"]
    four = results["closed"].get("cluster 4p")
    if four:
        out += ["", "Per master, cluster 4p (last closed-loop round):", "", *_per_master(four)]
    for name, row in results["closed"].items():
        if "partition_p50_ms" in row and row["partition_masters"]:
            home = set(row["reply_subscription_on"])
            parts = ", ".join(
                f"partition {p} (master :{row['partition_masters'][p]}"
                f"{', subscribed there' if row['partition_masters'][p] in home else ''}) {ms:.2f} ms"
                for p, ms in row["partition_p50_ms"].items()
            )
            where = (
                f"on node :{', :'.join(map(str, sorted(home)))}"
                if home
                else "**on no node** (a gateway without them learns each decision only at its deadline)"
            )
            out += ["", f"{name}: gateway's reply subscriptions {where}; closed-loop p50 per partition: {parts}"]
    for name in ("cluster 1p", "cluster 4p"):
        if name in results["closed"]:
            out += ["", f"Per node, {name} (closed loop):", "", *_per_node(results["closed"][name])]
    out += [
        "",
        f"**Same load per partition** (open loop, {args['rate_per_partition']:g}/s per partition, "
        f"{args['open_s']:g} s per platform; latency from the scheduled send):",
        "",
        *_flat(results),
        "",
        "Redis per decision at that load:",
        "",
        *_redis_cost(results, "open"),
    ]
    if "input_bytes" in results:
        outcome = results.get("outcome_key", {})
        keys = ", ".join(f"{name} {v['bytes_per_key']:.0f} B ({v['keys']} sampled)" for name, v in outcome.items())
        out += [
            "",
            f"Memory: hook input {results['input_bytes']:.0f} B; decision-log record (MEMORY USAGE / XLEN) in "
            f"the last column above; outcome key: {keys}.",
        ]
    if "publish_latency" in results:
        text = "; ".join(
            f"{name}: p50 {v['p50_ms']:.2f} ms, p99 {v['p99_ms']:.2f} ms, max {v['max_ms']:.1f} ms"
            for name, v in results["publish_latency"].items()
        )
        out += ["", f"Pub/Sub alone on the cluster (200 messages/s for 3 s): {text}."]
    for fo in results.get("failover", []):
        out += [
            "",
            f"**Failover** (open loop {args['failover_rate']:g}/s for {args['failover_s']:g} s on cluster 4p, "
            f"latency from the scheduled send):",
            "",
            *_failover(fo),
        ]
    return "\n".join(out)


__all__ = ["markdown"]
