"""How the example policy fares on other command guards' test suites: ``python bench/corpus_guards.py``.

The corpus (``bench/data/guards_corpus.jsonl``, built by ``bench/corpus_guards_extract.py``
from the public test suites of Claude Code Safety Net, DCG, disler's hook patterns and Dippy;
attribution in ``bench/data/NOTICE.md``) holds each command those guards must block, must allow,
or (Dippy) must not approve without a person. Each goes through ``examples/policy.yaml`` (or
``--policy``) in this process, as a dispatcher evaluates it (:class:`hookbus.policytools.runner.
CaseRunner`: the dispatcher's engine, judging of the command included), as a Claude Code
``PreToolUse`` with ``cwd`` ``/home/dev/project``. Reported per corpus and per category:

- must block: the share denied, and the share denied or asked;
- must allow: the share denied (a false positive), and the share denied or asked;
- Dippy's must-not-auto-approve cases: the share asked or denied, all of them and those on the
  programs the pack covers (:data:`PACK_PROGRAMS`); its must-allow cases: the share denied or
  asked.

Results: a Markdown table on stdout, and ``bench/results/corpus_guards.json`` with every case
the policy got wrong (``--misses N`` prints N of them per group, an arguable one with why).

Notes. A peer's expectation that is arguable is kept, flagged ``arguable`` with why
(:data:`corpus_guards_extract.ARGUABLE`), counted in "all" and left out of the next row; where
hookbus keeps such a case denied (an unterminated quote: bash runs nothing of it and hookbus
cannot judge it; a DCG gap that destroys data; ``git reset --hard`` in a mode that allows it),
the note says why. Two readings differ from a peer's on purpose: a word known only at run time
(what ``xargs`` reads, ``$(...)``) does not meet a pattern whose ``*`` is followed inside a word
by part of a file name (``cat *.env``): the pack's secret rules are about the secret named in
the command, and a file another program lists at run time is for the file tools' rules, so
``xargs cat`` is allowed and ``cat .env`` denied; and ``TMPDIR=/x rm -rf $TMPDIR/y`` expands the
value from before the assignment, as bash does, so it is asked as a temporary directory where
Safety Net expects it blocked as ``/x``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bus.policy.loading import load_policy  # noqa: E402
from hookbus.policytools.cases import Case, LoadedCase  # noqa: E402
from hookbus.policytools.runner import CaseRunner  # noqa: E402

CORPUS = REPO / "bench" / "data" / "guards_corpus.jsonl"
CWD = "/home/dev/project"
DIPPY = "ldayton/Dippy"
#: The programs on which the dangerous-commands pack asks before any change (cloud and cluster
#: CLIs, containers, infrastructure as code, recursive deletes): Dippy's cases on these are the
#: target. On the others it names (git, npm, cargo, gh, curl, ...) it asks only before what
#: destroys or publishes, where Dippy asks before every change (``git commit``, ``npm install``).
PACK_PROGRAMS = frozenset(
    "aws gcloud gsutil az kubectl helm terraform tofu pulumi docker docker-compose podman rm shred dd mkfs".split()
)
_PROGRAM = re.compile(r"^\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:sudo\s+)?(\S+)")


def program(command: str) -> str:
    """The first program a command names (after assignments and ``sudo``), without its directory."""
    m = _PROGRAM.match(command)
    return m.group(1).rsplit("/", 1)[-1] if m else ""


def load_corpus(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


async def judge(runner: CaseRunner, cases: list[dict[str, Any]]) -> list[str]:
    """The policy's decision on each case, in order."""
    out = []
    for i, item in enumerate(cases):
        field = "command" if item["tool"] == "Bash" else "file_path"
        case = Case.model_validate(
            {"name": f"case {i}", "tool": item["tool"], "input": {field: item[field]}, "cwd": CWD, "expect": {}}
        )
        result = await runner.run(LoadedCase(case, str(CORPUS), None))
        out.append("error" if result.error else result.decision)
    return out


def rate(hits: int, total: int) -> str:
    return f"{hits / total:.1%} ({hits}/{total})" if total else "-"


def report(cases: list[dict[str, Any]], decisions: list[str], misses: int) -> dict[str, Any]:
    groups: dict[str, list[tuple[dict[str, Any], str]]] = defaultdict(list)
    for item, decision in zip(cases, decisions, strict=True):
        item = {**item, "decision": decision}
        if item["source"] == DIPPY:
            groups[f"dippy {item['expect']}"].append((item, decision))
            if item["expect"] == "ask" and program(item["command"]) in PACK_PROGRAMS:
                groups["dippy ask covered"].append((item, decision))
            if item["expect"] == "allow" and program(item["command"]) in PACK_PROGRAMS:
                groups["dippy allow covered"].append((item, decision))
        else:
            groups[f"{item['expect']} {item['source']}"].append((item, decision))
            groups[f"{item['expect']} all"].append((item, decision))
            if not item.get("arguable"):
                groups[f"{item['expect']} all, arguable left out"].append((item, decision))
            if item["expect"] == "block":
                groups[f"category {item['category']}"].append((item, decision))

    def count(name: str, *wanted: str) -> tuple[int, int]:
        found = groups.get(name, [])
        return sum(d in wanted for _, d in found), len(found)

    summary: dict[str, Any] = {}
    print("| corpus | cases | denied | denied or asked |\n|---|---|---|---|")
    for name in sorted(groups):
        if name.startswith(("block", "allow")):
            deny, total = count(name, "deny")
            either, _ = count(name, "deny", "ask")
            print(f"| {name} | {total} | {rate(deny, total)} | {rate(either, total)} |")
            summary[name] = {"cases": total, "denied": deny, "denied_or_asked": either}
    print("\n| Dippy | cases | asked or denied |\n|---|---|---|")
    for name in ("dippy ask", "dippy ask covered", "dippy allow", "dippy allow covered"):
        either, total = count(name, "deny", "ask")
        print(f"| {name} | {total} | {rate(either, total)} |")
        summary[name] = {"cases": total, "denied_or_asked": either}
    per_program: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for name, at in (("dippy ask", 0), ("dippy allow", 2)):
        for item, decision in groups.get(name, []):
            counts = per_program[program(item["command"])]
            counts[at] += decision in ("deny", "ask")
            counts[at + 1] += 1
    print("\n| Dippy, by program (most cases first) | must ask: asked or denied | must allow: asked or denied |")
    print("|---|---|---|")
    for name, (hit, total, fp, allowed) in sorted(per_program.items(), key=lambda kv: -kv[1][1] - kv[1][3])[:24]:
        mark = " (covered)" if name in PACK_PROGRAMS else ""
        print(f"| {name}{mark} | {rate(hit, total)} | {rate(fp, allowed)} |")
    print("\n| must-block category | cases | denied or asked |\n|---|---|---|")
    for name in sorted(n for n in groups if n.startswith("category ")):
        either, total = count(name, "deny", "ask")
        print(f"| {name.removeprefix('category ')} | {total} | {rate(either, total)} |")
        summary[name] = {"cases": total, "denied_or_asked": either}
    wrong: dict[str, list[dict[str, Any]]] = {
        "missed (must block, got none or allow)": [
            i for i, d in groups.get("block all", []) if d not in ("deny", "ask")
        ],
        "false positives (must allow, denied)": [i for i, d in groups.get("allow all", []) if d == "deny"],
        "asked (must allow)": [i for i, d in groups.get("allow all", []) if d == "ask"],
        "dippy missed (covered, must ask)": [
            i for i, d in groups.get("dippy ask covered", []) if d not in ("deny", "ask")
        ],
        "dippy false positives": [i for i, d in groups.get("dippy allow", []) if d in ("deny", "ask")],
        "errors": [i for group in groups.values() for i, d in group if d == "error"],
    }
    for title, found in wrong.items():
        if misses and found:
            print(f"\n{title}: {len(found)}")
            for item in found[:misses]:
                text = item.get("command", item.get("file_path", ""))
                why = f"; arguable: {item['note']}" if item.get("arguable") else ""
                print(f"  [{item['decision']}] {text[:160]!r}  ({item['category']}; {item['source']}{why})")
    return {"summary": summary, "wrong": wrong}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", action="append", default=None, help="policy file(s) (default: the example)")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--misses", type=int, default=0, help="print this many wrong cases of each group")
    args = parser.parse_args()
    paths = args.policy or [str(REPO / "examples" / "policy.yaml")]
    policy = load_policy(paths)
    cases = load_corpus(args.corpus)
    runner = CaseRunner(policy, run_handlers=False, sandbox="")
    started = time.perf_counter()
    decisions = asyncio.run(judge(runner, cases))
    elapsed_s = time.perf_counter() - started
    print(f"{len(cases)} cases through {', '.join(paths)} in {elapsed_s:.1f} s\n")
    found = report(cases, decisions, args.misses)
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "corpus_guards.json").write_text(json.dumps({"policy": paths, **found}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
