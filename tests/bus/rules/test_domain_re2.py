"""``WebFetch(domain:...)`` with several ``*`` in a label runs in linear time on RE2."""

from __future__ import annotations

from bus.rules.permissions import parse_rule, rule_matches


def test_many_wildcards_in_a_label_against_a_long_host() -> None:
    # On a backtracking engine a 100-character host took 46 s against this rule.
    rule = parse_rule("WebFetch(domain:" + "*a" * 8 + "*b)")
    assert not rule_matches(rule, "WebFetch", {"url": "https://" + "a" * 10_000 + ".com/"})
    assert rule_matches(rule, "WebFetch", {"url": "https://x." + "a" * 10_000 + "b/"})


def test_domain_rules_still_match_as_before() -> None:
    rule = parse_rule("WebFetch(domain:*.example.com)")
    assert rule_matches(rule, "WebFetch", {"url": "https://api.example.com/x"})
    assert not rule_matches(rule, "WebFetch", {"url": "https://example.com/x"})
    plain = parse_rule("WebFetch(domain:example.com)")
    assert rule_matches(plain, "WebFetch", {"url": "https://a.b.example.com/x"})
    assert not rule_matches(plain, "WebFetch", {"url": "https://example.com.evil/x"})
    assert not rule_matches(plain, "WebFetch", {"url": "https://exa\ud800mple.com/x"})
