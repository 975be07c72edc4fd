"""``/v1/approvals``: the pending approvals of a tenant, and a person's answers (docs/api.md).

* ``GET /v1/approvals`` (``?tenant=`` for an org admin), ``GET /v1/approvals/{id}``: a tenant's
  tokens see their own tenant's approvals only (another tenant's id is a 404); org admins see all.
* ``POST /v1/approvals/{id}/approve`` with ``{"for": "once"|"session"|"always", "input": {...}}``
  and ``POST /v1/approvals/{id}/deny`` with ``{"reason": "..."}``: approver tokens of the
  approval's tenant (``HOOKBUS_APPROVER_TOKENS``) and org admins only, never the token that
  asked; ``always`` is an org admin's (it writes a policy version). An optional
  ``X-Hookbus-Approver`` header names the person in the record.

Every refusal leaves the approval as it was: 400 bad body, 403 not allowed, 404 unknown id,
409 answered already (or the same approver twice), 410 expired, 413 too large, 422 an edit the
policy denies.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response
from starlette.routing import Route

from bus.approvals.approval import SCOPES, Approval, Outcome, Status
from bus.approvals.asking import approved_always
from bus.approvals.recheck import MAX_EDITED_INPUT_BYTES, edit_refusal
from bus.errors import BusUnavailable, RequestRejected
from bus.runtime.settings import Settings
from bus.stream.protocol import now_ms
from gateway.access import Caller, check_single_authorization, json_object, rejection, request_caller

#: The largest answer body, in bytes (an edited input and its wrapping).
MAX_ANSWER_BYTES: Final = MAX_EDITED_INPUT_BYTES + 4096
_NAME = re.compile(r"[^\w .@+-]")
#: Approvals a list answers by default, and at most (``?limit=``).
DEFAULT_LIST: Final = 500
MAX_LIST: Final = 20_000


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


def _who(caller: Caller, request: HTTPRequest) -> str:
    name = _NAME.sub("", request.headers.get("x-hookbus-approver", ""))[:64].strip()
    role = "org admin" if caller.admin else "approver"
    token = caller.token_id or caller.key[:12]
    return f"{name} ({role} {token})" if name else f"{role} {token}"


async def _body(request: HTTPRequest) -> dict[str, Any]:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
        raise RequestRejected(413, "payload_too_large", f"the answer is over {MAX_ANSWER_BYTES} bytes")
    raw = await request.body()
    if len(raw) > MAX_ANSWER_BYTES:
        raise RequestRejected(413, "payload_too_large", f"the answer is over {MAX_ANSWER_BYTES} bytes")
    return json_object(raw) if raw.strip() else {}


class ApprovalRoutes:
    """The routes, on one gateway's :class:`gateway.approvals.desk.ApprovalDesk`."""

    def __init__(self, settings: Settings, gateway: Any) -> None:
        self.settings = settings
        self.gateway = gateway
        self.desk = gateway.approvals

    def routes(self) -> list[Route]:
        return [
            Route("/v1/approvals", self.list, methods=["GET"]),
            Route("/v1/approvals/{approval_id}", self.show, methods=["GET"]),
            Route("/v1/approvals/{approval_id}/approve", self.approve, methods=["POST"]),
            Route("/v1/approvals/{approval_id}/deny", self.deny, methods=["POST"]),
        ]

    async def _caller(self, request: HTTPRequest) -> Caller:
        check_single_authorization(request.scope["headers"])
        return await request_caller(self.settings, request)

    async def _find(self, caller: Caller, approval_id: str) -> Approval:
        if not re.fullmatch(r"[0-9a-f]{16}", approval_id):
            raise RequestRejected(404, "not_found", f"no approval {approval_id!r} (ids are 16 hex digits)")
        approval: Approval | None = await self.desk.store.find(approval_id, caller.tenant)
        if approval is None:
            raise RequestRejected(404, "not_found", f"no approval {approval_id} in {caller.scope}")
        if approval.status == Status.PENDING and approval.deadline_ms <= now_ms():
            await self.desk.expire(approval.tenant, approval.id)
            approval = await self.desk.store.get(approval.tenant, approval.id) or approval
        return approval

    async def list(self, request: HTTPRequest) -> Response:
        try:
            caller = await self._caller(request)
            wanted = request.query_params.get("tenant")
            if caller.tenant is not None and wanted not in (None, "", caller.tenant):
                raise RequestRejected(403, "forbidden", f"this token sees tenant {caller.tenant} only")
            tenants = (
                [caller.tenant]
                if caller.tenant is not None
                else [wanted]
                if wanted
                else await self.desk.store.tenants()
            )
            raw_limit = request.query_params.get("limit", str(DEFAULT_LIST))
            if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_LIST:
                raise RequestRejected(400, "invalid_field", f"'limit' must be 1-{MAX_LIST} (got {raw_limit!r})")
            await self.desk.expire_overdue()
            limit = int(raw_limit)
            found = [approval for tenant in tenants for approval in await self.desk.store.pending(tenant, limit)]
        except RequestRejected as exc:
            return rejection(exc)
        except BusUnavailable:
            return rejection(RequestRejected(503, "unavailable", "Redis is unavailable", {"Retry-After": "1"}))
        found.sort(key=lambda a: a.deadline_ms)
        return _json({"approvals": [a.view() for a in found[:limit]]})

    async def show(self, request: HTTPRequest) -> Response:
        try:
            caller = await self._caller(request)
            approval = await self._find(caller, request.path_params["approval_id"])
        except RequestRejected as exc:
            return rejection(exc)
        except BusUnavailable:
            return rejection(RequestRejected(503, "unavailable", "Redis is unavailable", {"Retry-After": "1"}))
        return _json(approval.view())

    async def approve(self, request: HTTPRequest) -> Response:
        return await self._answer(request, Status.APPROVED)

    async def deny(self, request: HTTPRequest) -> Response:
        return await self._answer(request, Status.DENIED)

    async def _answer(self, request: HTTPRequest, status: Status) -> Response:
        try:
            caller = await self._caller(request)
            if not (caller.admin or caller.approver):
                raise RequestRejected(
                    403, "forbidden", "only approver tokens (HOOKBUS_APPROVER_TOKENS) and org admins answer approvals"
                )
            body = await _body(request)
            approval = await self._find(caller, request.path_params["approval_id"])
            if approval.requester and approval.requester in (caller.key, caller.token_id):
                raise RequestRejected(403, "forbidden", "the token that asked cannot answer its own approval")
            answer = await self._checked(caller, request, approval, status, body)
            approver = caller.token_id or caller.key
            grant_ms = (
                int(self.desk.settings_for(approval.tenant)[0].keep_seconds * 1000)
                if answer.get("for") == "session"
                else 0
            )
            result, state = await self.desk.store.answer(approval, status, answer, approver, grant_ms)
            if result == "expired":
                await self.desk.expire(approval.tenant, approval.id)
            if result == "first":  # the two-person rule: pending until a second, different approver
                view = (await self.desk.store.get(approval.tenant, approval.id) or approval).view()
                return _json({**view, "detail": "one more approver is needed (two-person rule)"}, 202)
            if result != "ok":
                raise _refusal(result, state, approval)
            settled = await self.desk.store.get(approval.tenant, approval.id) or approval
        except RequestRejected as exc:
            return rejection(exc)
        except BusUnavailable:
            return rejection(RequestRejected(503, "unavailable", "Redis is unavailable", {"Retry-After": "1"}))
        outcome = Outcome.APPROVED if status == Status.APPROVED else Outcome.DENIED
        self.desk.settled(settled, outcome)
        await self.desk.record_answer(settled, outcome)
        return _json(settled.view())

    def _always(self, caller: Caller, approval: Approval, body: dict[str, Any]) -> str:
        """The policy version an "approve always" names, once the policy in force approves the call."""
        if not caller.admin:
            raise RequestRejected(403, "forbidden", "approve always changes the policy: org admins only")
        if "input" in body:
            raise RequestRejected(400, "invalid_field", "approve always takes no edited input")
        settings = self.desk.settings_for(approval.tenant)[0]
        if approved_always(settings, approval.hook_input()) is None:
            raise RequestRejected(
                409,
                "needs_policy_push",
                "the policy in force does not approve this call: 'hookbus approvals approve ID --for always' "
                "pushes the version that does, then answers",
            )
        return str(body.get("version") or "")

    async def _checked(
        self, caller: Caller, request: HTTPRequest, approval: Approval, status: Status, body: dict[str, Any]
    ) -> dict[str, Any]:
        """The answer to store, once the body is checked (4xx otherwise)."""
        answer: dict[str, Any] = {"outcome": status, "by": _who(caller, request), "at_ms": now_ms()}
        if status == Status.DENIED:
            unknown = set(body) - {"reason"}
            reason = body.get("reason", "")
            if not isinstance(reason, str) or len(reason) > 2000:
                raise RequestRejected(400, "invalid_field", "'reason' must be a string of at most 2000 characters")
        else:
            unknown = set(body) - {"for", "input"}
            scope = body.get("for", "once")
            if scope not in SCOPES:
                raise RequestRejected(400, "invalid_field", f"'for' must be one of {', '.join(SCOPES)} (got {scope!r})")
            unknown -= {"version"}
            if scope == "always":
                answer["version"] = self._always(caller, approval, body)
            answer["for"] = scope
            if "input" in body:
                edited = body["input"]
                if len(orjson.dumps(edited)) > MAX_EDITED_INPUT_BYTES:
                    raise RequestRejected(
                        413, "payload_too_large", f"the edited input is over {MAX_EDITED_INPUT_BYTES} bytes"
                    )
                policy = self.desk.settings_for(approval.tenant)[1]
                why = edit_refusal(policy, approval.hook_input(), edited, approval.agent)
                if why is not None:
                    raise RequestRejected(422, "edit_refused", why)
                answer["input"] = edited
        if unknown:
            raise RequestRejected(400, "unknown_field", f"unknown field(s): {', '.join(sorted(unknown))}")
        if status == Status.DENIED:
            answer["reason"] = body.get("reason") or "denied by a person"
        return answer


def _refusal(result: str, state: str, approval: Approval) -> RequestRejected:
    if result == "unknown":
        return RequestRejected(404, "not_found", f"no approval {approval.id}")
    if result == "expired" or (result == "answered" and state == Status.EXPIRED):
        return RequestRejected(410, "expired", f"approval {approval.id} expired before this answer")
    if result == "answered":
        return RequestRejected(409, "already_answered", f"approval {approval.id} is {state} already")
    if result == "same_approver":
        return RequestRejected(409, "same_approver", f"approval {approval.id} needs a second, different approver")
    return RequestRejected(409, "conflict", f"approval {approval.id}: {result}")


__all__ = ["MAX_ANSWER_BYTES", "ApprovalRoutes"]
