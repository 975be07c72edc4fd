"""Stream entries of events (:class:`bus.stream.protocol.Request`): what gateways append, dispatchers read;
and the agent a decision-log record (:class:`bus.stream.protocol.LogRecord`) names."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from bus.errors import ProtocolError
from bus.stream.protocol import LogRecord, Request

BLOCKING = Request(
    event_id="e1",
    event="PreToolUse",
    tenant="acme",
    payload=b'{"session_id":"s"}',
    received_ms=1_700_000_000_000,
    deadline_ms=1_700_000_001_500,
    reply_to="hookbus:reply:g1",
    dialect="cursor",
    fail_open="",
    policy="org-3|acme-7",
)
RECORDED = Request(
    event_id="e2",
    event="Notification",
    tenant="default",
    payload=b"not json",
    received_ms=1_700_000_000_000,
    fail_open="redis_unavailable",
)


def as_read(fields: dict[str, bytes | str | int]) -> dict[bytes, bytes]:
    """Fields as Redis hands them back: names and values as bytes."""
    return {name.encode(): value if isinstance(value, bytes) else str(value).encode() for name, value in fields.items()}


@pytest.mark.parametrize("request_", [BLOCKING, RECORDED])
def test_an_entry_is_two_fields_and_reads_back_as_the_same_request(request_: Request) -> None:
    fields = request_.encode()
    assert sorted(fields) == ["m", "p"]
    assert fields["p"] == request_.payload  # the hook input as the agent sent it
    assert Request.decode(as_read(fields)) == request_


@pytest.mark.parametrize("request_", [BLOCKING, RECORDED])
def test_an_entry_appended_by_an_older_gateway_still_reads(request_: Request) -> None:
    assert Request.decode(as_read(request_.named_fields())) == request_


def test_a_job_carries_the_named_fields_and_reads_back() -> None:
    job = BLOCKING.to_job()
    assert job["id"] == "e1" and job["rp"] == "hookbus:reply:g1" and job["p"] == '{"session_id":"s"}'
    assert Request.from_job(orjson.loads(orjson.dumps(job))) == BLOCKING


@pytest.mark.parametrize(
    "meta",
    [
        b"not json",
        b'{"id": "e1"}',
        b'["e1", "PreToolUse", "acme", 1, "", 0, "", ""]',  # one value short
        b'["e1", "PreToolUse", "acme", "1700000000000", "", 0, "", "", ""]',  # the time as text
        b'["e1", 7, "acme", 1, "", 0, "", "", ""]',  # the event as a number
        b'["e1", "PreToolUse", null, 1, "", 0, "", "", ""]',
        b'["e1", "PreToolUse", "acme", 1, "", 0, "", "", 5]',  # the policy as a number
        b'["e1", "PreToolUse", "acme", 1, "", 0, "", [], ""]',  # the fail-open reason as a list
        b'["e1", "PreToolUse", "acme", 1, "", 0.5, "", "", ""]',  # the deadline as a float
        b'["e1", "PreToolUse", "acme", true, "", 0, "", "", ""]',  # the time as a boolean
        b'["e1", "PreToolUse", "acme", 1, "", 0, "", "", "", "tok", 7]',  # the client address as a number
        b'["e1", "PreToolUse", "acme", 1, "", 0, "", "", "", "tok", "10.0.0.7", "x"]',  # one value too many
        b"7",
    ],
)
def test_a_malformed_entry_is_a_protocol_error_not_a_crash(meta: bytes) -> None:
    with pytest.raises(ProtocolError, match="malformed stream entry"):
        Request.decode({b"m": meta, b"p": b"{}"})


def test_an_entry_without_its_hook_input_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="malformed stream entry"):
        Request.decode({b"m": BLOCKING.encode()["m"]})  # type: ignore[dict-item]


def test_a_request_names_its_agent_by_its_dialect_claude_without_one() -> None:
    assert (BLOCKING.agent, RECORDED.agent) == ("cursor", "claude")


def _log_record(agent: str = "claude") -> LogRecord:
    return LogRecord(
        event_id="e1",
        event="PreToolUse",
        tenant="acme",
        session_id="s",
        outcome="decided",
        decision="deny",
        output={},
        payload=b"{}",
        received_ms=1_700_000_000_000,
        decided_ms=1_700_000_000_012,
        agent=agent,
    )


def test_a_record_names_its_agent_and_reads_it_back() -> None:
    written = _log_record(agent="gemini")
    read = LogRecord.decode(as_read(written.encode()))
    assert read == written
    assert orjson.loads(written.meta())["ag"] == "gemini"
    assert read.to_json()["agent"] == "gemini"
    assert orjson.loads(_log_record().meta())["ag"] == "claude"  # every record names one, Claude Code too


def test_a_record_written_before_records_named_their_agent_reads_as_claude() -> None:
    fields = as_read(_log_record(agent="gemini").encode())
    meta = orjson.loads(fields[b"r"])
    del meta["ag"]
    fields[b"r"] = orjson.dumps(meta)
    read = LogRecord.decode(fields)
    assert (read.agent, read.to_json()["agent"]) == ("claude", "claude")


@pytest.mark.parametrize("request_", [BLOCKING, RECORDED])
def test_the_trace_context_travels_in_a_field_of_its_own(request_: Request) -> None:
    traced = dataclasses.replace(request_, trace="00-" + "ab" * 16 + "-" + "cd" * 8 + "-01")
    fields = traced.encode()
    assert fields["t"] == traced.trace and sorted(fields) == ["m", "p", "t"]
    assert Request.decode(as_read(fields)) == traced
    assert Request.decode(as_read(traced.named_fields())) == traced
    assert Request.from_job(traced.to_job()).trace == traced.trace
    assert Request.decode(as_read(request_.encode())).trace == ""  # an untraced (or older) entry


def test_a_record_names_its_trace_when_it_has_one() -> None:
    record = LogRecord("e1", "PreToolUse", "acme", "s1", "decided", "deny", {}, b"{}", 1, 2, trace_id="ab" * 16)
    back = LogRecord.decode(
        {k.encode(): v if isinstance(v, bytes) else str(v).encode() for k, v in record.encode().items()}
    )
    assert back.trace_id == "ab" * 16 and back.to_json()["trace_id"] == "ab" * 16
    plain = LogRecord("e1", "PreToolUse", "acme", "s1", "decided", "deny", {}, b"{}", 1, 2)
    assert b"tid" not in plain.meta() and plain.to_json()["trace_id"] is None


def test_the_hook_input_is_parsed_once_and_shared_by_every_stage() -> None:
    request = Request.decode(as_read(dataclasses.replace(BLOCKING).encode()))
    first = request.hook_input()
    assert first == {"session_id": "s"}
    assert request.hook_input() is first  # the same object: no stage parses it again
    assert Request.decode(as_read(request.encode())) == request  # never written to the stream


@pytest.mark.parametrize("payload", [b"not json", b"[1, 2]", b'"text"'])
def test_a_hook_input_that_is_not_an_object_is_a_value_error(payload: bytes) -> None:
    request = dataclasses.replace(BLOCKING, payload=payload)
    with pytest.raises(ValueError):
        request.hook_input()
    assert request.parsed is None


def test_the_sender_travels_at_the_end_of_the_metadata_and_into_the_record() -> None:
    sent = dataclasses.replace(BLOCKING, token_id="tok_1", client_address="10.0.0.7")
    meta = orjson.loads(as_read(sent.encode())[b"m"])
    assert meta[-2:] == ["tok_1", "10.0.0.7"] and len(meta) == 11
    assert Request.decode(as_read(sent.encode())) == sent
    assert len(orjson.loads(as_read(BLOCKING.encode())[b"m"])) == 9  # no sender: the entry is as before
    for bad in (b'["e1", "PreToolUse", "acme", 1, "", 0, "", "", "", "tok"]', b'["e1","E","a",1,"",0,"","","",1,""]'):
        with pytest.raises(ProtocolError, match="malformed stream entry"):
            Request.decode({b"m": bad, b"p": b"{}"})
    record = LogRecord("e1", "PreToolUse", "acme", "s1", "decided", "deny", {}, b"{}", 1, 2, token_id="tok_1")
    record.client_address = "10.0.0.7"
    back = LogRecord.decode(
        {k.encode(): v if isinstance(v, bytes) else str(v).encode() for k, v in record.encode().items()}
    )
    assert (back.token_id, back.client_address) == ("tok_1", "10.0.0.7")
    assert back.to_json()["token_id"] == "tok_1" and back.to_json()["client_address"] == "10.0.0.7"
    assert b"tok" not in LogRecord("e1", "E", "a", "s", "decided", "none", {}, b"{}", 1, 2).meta()
