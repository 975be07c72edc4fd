"""A decision-log record as an OCSF event: API Activity (class 6003) with the Security Control profile.

``hookbus audit export --format ocsf`` and ``hookbus audit follow --format ocsf`` write records
this way. The agent's call (a tool call, a prompt, a stop ...) is the API activity, hookbus's
decision on it the security control's disposition. docs/audit-formats.md maps every field;
the tests validate each output against the OCSF schema's JSON (tests/data/ocsf).
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Any, Final

from bus.hooks.decisions import Decision, RecordOutcome
from bus.runtime.metrics import build_version
from bus.stream.protocol import LogRecord, payload_json

#: The OCSF schema version the events follow (``metadata.version``).
OCSF_VERSION: Final = "1.8.0"
CLASS_UID: Final = 6003
CATEGORY_UID: Final = 6
#: ``activity_id`` Other: an agent's call is neither create, read, update nor delete; its
#: ``activity_name`` is the hook event.
ACTIVITY_OTHER: Final = 99
#: ``action_id`` and ``disposition_id`` (with their captions) of each decision.
_CONTROL: Final[dict[str, tuple[int, str, int, str]]] = {
    Decision.ALLOW: (1, "Allowed", 1, "Allowed"),
    Decision.DENY: (2, "Denied", 2, "Blocked"),
    Decision.BLOCK: (2, "Denied", 2, "Blocked"),
    Decision.ASK: (0, "Unknown", 23, "Challenge"),
    Decision.DEFER: (0, "Unknown", 14, "Delayed"),
    Decision.NONE: (1, "Allowed", 16, "No Action"),
}
#: A fail-open event went ahead because no decision was made: allowed, with an error.
_FAIL_OPEN: Final = (1, "Allowed", 27, "Error")
#: A non-blocking event (nothing to allow or deny): observed and logged.
_RECORDED: Final = (3, "Observed", 17, "Logged")
_SEVERITY: Final = {1: "Informational", 3: "Medium"}


@functools.cache
def _product() -> dict[str, str]:
    return {"name": "hookbus", "vendor_name": "hookbus", "version": build_version()}


def _endpoint(address: str) -> dict[str, str]:
    """``src_endpoint``: the client's IP address, or its name when it is not one; ``unknown`` when
    the record does not say (written before records named it)."""
    if not address:
        return {"name": "unknown"}
    try:
        return {"ip": str(ipaddress.ip_address(address))}
    except ValueError:
        return {"name": address}


def _control(record: LogRecord) -> tuple[int, str, int, str]:
    if record.outcome == RecordOutcome.FAIL_OPEN:
        return _FAIL_OPEN
    if record.outcome == RecordOutcome.RECORDED:
        return _RECORDED
    return _CONTROL.get(record.decision, (99, record.decision, 99, record.decision))


def _actor(record: LogRecord) -> dict[str, Any]:
    session: dict[str, Any] = {"uid": record.session_id}
    actor: dict[str, Any] = {"app_name": record.agent, "session": session}
    if record.token_id:
        session["credential_uid"] = record.token_id
        actor["user"] = {"uid": record.token_id, "type_id": 99, "type": "hookbus token"}
    return actor


def _deciding_rule(record: LogRecord) -> dict[str, str] | None:
    """``firewall_rule``: the first handler that made the decision, if one did."""
    for hook in record.hooks:
        if hook.get("decided") and hook.get("id"):
            rule = {"uid": str(hook["id"]), "name": str(hook["id"]), "type": str(hook.get("type", ""))}
            if hook.get("reason"):
                rule["desc"] = str(hook["reason"])
            return rule
    return None


def ocsf_event(log_id: str, record: LogRecord) -> dict[str, Any]:
    """``record`` (its decision-log entry ``log_id``) as an OCSF 1.8 API Activity event."""
    action_id, action, disposition_id, disposition = _control(record)
    blocked = disposition_id == 2
    severity_id = 3 if blocked else 1
    failed = record.outcome == RecordOutcome.FAIL_OPEN
    operation = record.tool_name or record.event
    event: dict[str, Any] = {
        "class_uid": CLASS_UID,
        "class_name": "API Activity",
        "category_uid": CATEGORY_UID,
        "category_name": "Application Activity",
        "activity_id": ACTIVITY_OTHER,
        "activity_name": record.event,
        "type_uid": CLASS_UID * 100 + ACTIVITY_OTHER,
        "type_name": "API Activity: Other",
        "time": record.received_ms,
        "start_time": record.received_ms,
        "end_time": record.decided_ms,
        "duration": record.latency_ms,
        "severity_id": severity_id,
        "severity": _SEVERITY[severity_id],
        "status_id": 2 if failed else 1,
        "status": "Failure" if failed else "Success",
        "message": f"{record.event} {operation}: {record.decision}" if record.tool_name else record.event,
        "action_id": action_id,
        "action": action,
        "disposition_id": disposition_id,
        "disposition": disposition,
        "is_alert": blocked,
        "policy": {"uid": record.revision or "unknown", "name": "hookbus policy", "version": record.revision},
        "actor": _actor(record),
        "src_endpoint": _endpoint(record.client_address),
        "dst_endpoint": {"svc_name": "hookbus"},
        "api": {
            "operation": operation,
            "service": {"name": "hookbus"},
            "request": {"uid": record.tool_use_id or record.event_id, "data": payload_json(record.payload)},
            "response": {"data": record.output},
        },
        "metadata": {
            "version": OCSF_VERSION,
            "product": _product(),
            "uid": record.event_id,
            "log_name": "decisions",
            "log_provider": "hookbus",
            "tenant_uid": record.tenant,
            "correlation_uid": record.session_id,
            "profiles": ["security_control"],
        },
        "unmapped": {
            "log_id": log_id,
            "event": record.event,
            "outcome": record.outcome,
            "decision": record.decision,
            "agent": record.agent,
            "hooks": record.hooks,
            "shadow": record.shadow,
        },
    }
    if failed:
        event["status_detail"] = record.fail_open
    if record.reason:
        event["policy"]["desc"] = record.reason
        event["api"]["response"]["message"] = record.reason
    if (rule := _deciding_rule(record)) is not None:
        event["firewall_rule"] = rule
    if record.tool_name:
        event["resources"] = [{"type": "tool", "name": record.tool_name, "uid": record.tool_use_id or record.event_id}]
    if record.trace_id:
        event["trace"] = {"uid": record.trace_id}
        event["metadata"]["profiles"].append("trace")
    unmapped = event["unmapped"]
    for key, value in (
        ("agent_id", record.agent_id),
        ("agent_type", record.agent_type),
        ("masked", record.masked),
        ("chain", record.chain),
        ("approval", record.approval),
    ):
        if value:
            unmapped[key] = value
    return event


__all__ = ["CLASS_UID", "OCSF_VERSION", "ocsf_event"]
