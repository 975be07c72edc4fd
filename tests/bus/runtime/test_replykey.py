"""The reply key: a MAC over the request as the gateway sent it and the reply, and where the key comes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus.errors import ConfigError
from bus.runtime.replykey import MAC_CHARS, ReplyKey, key_or_process, new_secret, process_secret, reply_json, verify
from bus.runtime.settings import Settings

META = b'["e1","PreToolUse","default",1,"hookbus:reply:g",2,"","",""]'
PAYLOAD = b'{"tool_input":{"command":"rm -rf /"}}'
REPLY = b'{"id":"e1","out":{},"dec":"deny","fo":null,"h":[]}'


def test_a_sealed_reply_verifies_for_its_request_only() -> None:
    key = ReplyKey(new_secret())
    sealed = key.seal(META, PAYLOAD, REPLY)
    assert len(sealed) == MAC_CHARS + len(REPLY) and bytes(reply_json(sealed)) == REPLY
    assert verify(key.bind(META, PAYLOAD), sealed)
    assert not verify(ReplyKey(new_secret()).bind(META, PAYLOAD), sealed)  # another key
    assert not verify(key.bind(META.replace(b"e1", b"e2"), PAYLOAD), sealed)  # another event
    assert not verify(key.bind(META, PAYLOAD.replace(b"rm -rf /", b"ls")), sealed)  # another request
    assert not verify(key.bind(META, PAYLOAD), sealed.replace(b"deny", b"allo"))  # another answer
    assert not verify(key.bind(META, PAYLOAD), REPLY)  # none at all
    # The parts are length-prefixed: moving bytes between the request and the reply changes the MAC.
    moved = sealed[:MAC_CHARS] + PAYLOAD[-1:] + REPLY
    assert not verify(key.bind(META, PAYLOAD[:-1]), moved)


def test_a_binding_serves_every_reply_it_checks() -> None:
    key = ReplyKey(new_secret())
    binding = key.bind(META, PAYLOAD)
    forged = b"0" * MAC_CHARS + REPLY
    assert not verify(binding, forged)
    assert verify(binding, key.seal(META, PAYLOAD, REPLY))  # the state was copied, not consumed


def test_the_mac_is_the_same_from_one_request_to_the_next_and_across_versions() -> None:
    # Pinned: a gateway and a dispatcher of different releases (a rolling upgrade) must agree,
    # and a request's MAC must not depend on the requests bound before it with the same key.
    key = ReplyKey("a fixed reply key of forty-two characters!")
    pinned = b"478824ea5042820210875cb370a704376bce424c9319a8fba4b5dfa6862e5105"
    assert key.seal(META, PAYLOAD, REPLY) == pinned + REPLY
    key.bind(META.replace(b"e1", b"e2"), PAYLOAD)
    assert key.seal(META, PAYLOAD, REPLY) == pinned + REPLY
    assert verify(key.bind(META, PAYLOAD), pinned + REPLY)


def test_the_same_secret_makes_the_same_key_and_none_is_shown() -> None:
    secret = new_secret()
    assert verify(ReplyKey(secret).bind(META, PAYLOAD), ReplyKey(f"  {secret}\n").seal(META, PAYLOAD, REPLY))
    assert secret not in repr(ReplyKey(secret)) and repr(ReplyKey(secret)) == "ReplyKey(***)"
    assert ReplyKey("x" * 200)  # any length of at least 32 characters


def test_a_short_secret_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigError, match="at least 32 characters") as refused:
        ReplyKey("short-secret")
    assert "short-secret" not in str(refused.value)


def test_settings_read_the_key_from_the_environment_or_a_file(tmp_path: Path) -> None:
    secret = new_secret()
    assert Settings.from_env({}).reply_key is None
    from_env = Settings.from_env({"HOOKBUS_REPLY_KEY": secret}).reply_key
    assert from_env is not None and verify(from_env.bind(META, PAYLOAD), ReplyKey(secret).seal(META, PAYLOAD, REPLY))
    key_file = tmp_path / "reply.key"
    key_file.write_text(secret + "\n")
    from_file = Settings.from_env({"HOOKBUS_REPLY_KEY_FILE": str(key_file)}).reply_key
    assert from_file is not None and verify(from_file.bind(META, PAYLOAD), ReplyKey(secret).seal(META, PAYLOAD, REPLY))
    assert secret not in repr(Settings.from_env({"HOOKBUS_REPLY_KEY": secret}))
    with pytest.raises(ConfigError, match="cannot read HOOKBUS_REPLY_KEY_FILE"):
        Settings.from_env({"HOOKBUS_REPLY_KEY_FILE": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="no reply key: set HOOKBUS_REPLY_KEY"):
        Settings.from_env({}).require_reply_key()


def test_roles_embedded_in_one_process_share_its_key() -> None:
    assert process_secret() == process_secret()
    gateway, dispatcher = key_or_process(None), key_or_process(None)
    assert verify(gateway.bind(META, PAYLOAD), dispatcher.seal(META, PAYLOAD, REPLY))
    given = ReplyKey(new_secret())
    assert key_or_process(given) is given
