"""Sentinel URLs for the async queue (:mod:`bus.redis.urls`): what is read from them, the one-line
errors for malformed ones at settings time, and that no password reaches a log or a repr."""

from __future__ import annotations

import pytest

from bus.errors import ConfigError
from bus.redis.urls import SENTINEL_SYNTAX, SentinelURL, mask_url, parse_sentinel_url
from bus.runtime.settings import Settings


def test_every_part_of_a_sentinel_url_is_read() -> None:
    url = "redis+sentinel://queue:p%40ss%2Fw@s1:26380,s2,[::1]:26381/my%20master/3?sentinel_password=sp"
    assert parse_sentinel_url(url) == SentinelURL(
        sentinels=(("s1", 26380), ("s2", 26379), ("::1", 26381)),
        service_name="my master",
        db=3,
        username="queue",
        password="p@ss/w",
        sentinel_password="sp",
    )
    assert parse_sentinel_url("redis+sentinel://s1/mymaster") == SentinelURL((("s1", 26379),), "mymaster")
    assert parse_sentinel_url("REDIS+SENTINEL://:pw@s1/mymaster/").password == "pw"


def test_the_passwords_stay_out_of_reprs_and_logs() -> None:
    url = "redis+sentinel://:master-pw@s1:26379,s2:26379/mymaster/0?sentinel_password=sentinel-pw"
    assert "pw" not in repr(parse_sentinel_url(url))
    assert mask_url(url) == "redis+sentinel://:***@s1:26379,s2:26379/mymaster/0?sentinel_password=***"
    assert "pw" not in repr(Settings(redis_url="redis://h:1", queue_redis_url=url))
    assert mask_url("redis://user:pw@Host:6379/0") == "redis://user:***@Host:6379/0"
    assert mask_url("unix:///run/redis.sock?db=1&password=pw") == "unix:///run/redis.sock?db=1&password=***"
    assert mask_url("redis://h:6379/0") == "redis://h:6379/0"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis+sentinel://s1", "the service name"),
        ("redis+sentinel:///mymaster", "no Sentinel given"),
        ("redis+sentinel://s1,,s2/mymaster", "has no host"),
        ("redis+sentinel://s1:port/mymaster", "'s1:port' has no valid port"),
        ("redis+sentinel://s1:70000/mymaster", "has no valid port"),
        ("redis+sentinel://[::1/mymaster", "[IPv6 address]:port"),
        ("redis+sentinel://s1/mymaster/zero", "the database 'zero' is not a number"),
        ("redis+sentinel://s1/mymaster/0/1", "more than the service name and the database"),
        ("redis+sentinel://s1/mymaster?password=x", "unknown option password"),
        ("redis+sentinel://s1/mymaster#top", "fragment"),
    ],
)
def test_a_malformed_sentinel_url_is_a_one_line_config_error_at_settings_time(url: str, why: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({"HOOKBUS_REDIS_URL": "redis://h:1", "HOOKBUS_QUEUE_REDIS_URL": url})
    message = str(raised.value)
    assert message.startswith("HOOKBUS_QUEUE_REDIS_URL is not a valid Sentinel URL: ") and why in message
    assert message.endswith(f"the form is {SENTINEL_SYNTAX}") and "\n" not in message


def test_other_queue_urls_are_checked_too() -> None:
    for url, why in (("redis+cluster://h:1", "cannot run on a Redis Cluster"), ("http://h:1", "http scheme")):
        with pytest.raises(ConfigError, match=why):
            Settings.from_env({"HOOKBUS_QUEUE_REDIS_URL": url})
    for url in ("redis://h:1/2", "rediss://:pw@h:1", "unix:///run/redis.sock", "redis+sentinel://s1/mymaster"):
        assert Settings.from_env({"HOOKBUS_QUEUE_REDIS_URL": url}).queue_redis_url == url


def test_a_cluster_bus_without_a_queue_redis_names_the_urls_it_takes() -> None:
    settings = Settings.from_env({"HOOKBUS_REDIS_URL": "redis://h:1", "HOOKBUS_REDIS_CLUSTER": "1"})
    with pytest.raises(ConfigError) as raised:
        _ = settings.queue_url
    assert "HOOKBUS_QUEUE_REDIS_URL" in str(raised.value) and SENTINEL_SYNTAX in str(raised.value)
    sentinel = "redis+sentinel://s1:26379,s2:26379/mymaster"
    on_sentinel = Settings.from_env(
        {"HOOKBUS_REDIS_URL": "redis://h:1", "HOOKBUS_REDIS_CLUSTER": "1", "HOOKBUS_QUEUE_REDIS_URL": sentinel}
    )
    assert on_sentinel.queue_url == sentinel


def test_a_sentinel_url_names_the_queue_only_not_the_bus() -> None:
    with pytest.raises(ConfigError, match="names the async queue's Redis only"):
        Settings.from_env({"HOOKBUS_REDIS_URL": "redis+sentinel://s1/mymaster"})
