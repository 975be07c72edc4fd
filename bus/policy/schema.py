"""Pydantic models of a policy file: Claude Code's ``hooks`` format plus hookbus's extensions.

Handlers are validated at least as strictly as SchemaStore's Claude Code settings schema:
unknown fields, wrong types, bad enum values and non-positive timeouts are errors. Field
names on the wire are Claude Code's (camelCase, ``if``, ``async``); in Python they are
snake_case.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Iterable
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from bus.dialects import DIALECTS
from bus.hooks.events import EVENTS, HANDLER_TYPES
from bus.policy.approvals import ApprovalsSettings
from bus.policy.packs import pack_names
from bus.policy.sessionschema import SessionSettings, When
from bus.redaction.redact import BUILTIN_NAMES, compile_pattern, parse_pointer
from bus.rules.limits import Limits

FailMode = Literal["open", "closed"]

#: The most tries an async handler may be given (``maxTries``).
MAX_TRIES_LIMIT: Final = 100

#: Every handler ``type``, in the order messages list them.


def _known_agent(name: str) -> str:
    if name not in DIALECTS:
        hint = suggest(name, DIALECTS)
        raise ValueError(f"unknown agent {name!r}{hint} (known agents: {', '.join(DIALECTS)})")
    return name


#: An agent's name as a policy writes it: a dialect's (``claude`` is Claude Code's own format).
AgentName = Annotated[str, AfterValidator(_known_agent)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)


class HandlerBase(_Strict):
    """Fields every handler type accepts."""

    type: str
    timeout: Annotated[float, Field(gt=0)] | None = None
    if_: str | None = Field(default=None, alias="if")
    status_message: str | None = Field(default=None, alias="statusMessage")
    once: bool = False
    async_: bool = Field(default=False, alias="async")
    fail_mode: FailMode = Field(default="open", alias="failMode")
    shadow: bool = False
    #: ``async`` delivery (hookbus): tries before a dead letter, and the age past which none is made.
    max_tries: Annotated[int, Field(ge=1, le=MAX_TRIES_LIMIT)] | None = Field(default=None, alias="maxTries")
    max_age_seconds: Annotated[float, Field(gt=0)] | None = Field(default=None, alias="maxAgeSeconds")
    #: Run only for events from these agents (hookbus); None: for every agent.
    agents: Annotated[list[AgentName], Field(min_length=1)] | None = None
    #: Its ``ask`` goes to the central approval queue (``hookbus.approvals``), not to the agent.
    approval: bool = False
    #: Run only while the session's state says so (``hookbus.session``); None: always.
    when: When | None = None


class CommandHandler(HandlerBase):
    """Claude Code's ``command`` hook: shell form, or exec form when ``args`` is set."""

    type: Literal["command"]
    command: Annotated[str, Field(min_length=1)]
    args: list[str] | None = None
    shell: Literal["bash", "powershell"] | None = None
    async_rewake: bool = Field(default=False, alias="asyncRewake")
    #: Literal variables for the hook (hookbus extension; Peri's ``env``).
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    #: Names of dispatcher environment variables the hook may see, beyond the default set.
    allowed_env_vars: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, alias="allowedEnvVars")


def _env_reference(value: str) -> str:
    if not re.fullmatch(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})", value):
        raise ValueError(
            "must name an environment variable as $NAME or ${NAME}: the secret itself is never written in the policy"
        )
    return value


class HttpHandler(HandlerBase):
    """Claude Code's ``http`` hook: POST the input JSON to ``url``."""

    type: Literal["http"]
    url: Annotated[str, Field(min_length=1)]
    headers: dict[str, str] = Field(default_factory=dict, repr=False)  # may carry literal tokens
    allowed_env_vars: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, alias="allowedEnvVars")
    #: ``$VAR`` holding a Standard Webhooks secret (``whsec_...``): requests are signed (hookbus).
    secret: Annotated[str, AfterValidator(_env_reference)] | None = None


class PromptHandler(HandlerBase):
    """Claude Code's ``prompt`` hook: one LLM call answering ``{ok, reason, impossible}``."""

    type: Literal["prompt"]
    prompt: Annotated[str, Field(min_length=1)]
    model: str | None = None
    continue_on_block: bool = Field(default=False, alias="continueOnBlock")


class AgentHandler(HandlerBase):
    """Claude Code's ``agent`` hook: a multi-turn LLM loop with read-only tools."""

    type: Literal["agent"]
    prompt: Annotated[str, Field(min_length=1)]
    model: str | None = None


class McpToolHandler(HandlerBase):
    """Claude Code's ``mcp_tool`` hook; ``url`` is hookbus's way to reach the server."""

    type: Literal["mcp_tool"]
    server: Annotated[str, Field(min_length=1)]
    tool: Annotated[str, Field(min_length=1)]
    input: dict[str, Any] = Field(default_factory=dict)
    url: str | None = None


class RuleHandler(HandlerBase):
    """hookbus's declarative handler: permission rules checked deny, ask, allow; first match decides."""

    type: Literal["rule"]
    deny: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    ask: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    allow: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    reason: str | None = None


class FunctionHandler(HandlerBase):
    """hookbus's in-process handler: a Python callable named ``module:attr``."""

    type: Literal["function"]
    function: Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")]


Handler = Annotated[
    CommandHandler | HttpHandler | PromptHandler | AgentHandler | McpToolHandler | RuleHandler | FunctionHandler,
    Field(discriminator="type"),
]


class MatcherGroup(_Strict):
    """One entry of ``hooks.<Event>[]``: a matcher and the handlers it guards."""

    matcher: str | None = None
    #: Its handlers run only while the session's state says so (``hookbus.session``).
    when: When | None = None
    hooks: list[Handler]
    #: Every handler's ``ask`` goes to the central approval queue (``hookbus.approvals``).
    approval: bool = False


def suggest(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` when ``name`` is a case or spelling variant of a choice, else ``""``."""
    lowered = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.8)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""


def _known_event(name: str) -> str:
    if name not in EVENTS:
        raise ValueError(f"unknown event {name!r}{suggest(name, EVENTS)}")
    return name


def _known_pack(name: str) -> str:
    if name not in pack_names():
        hint = suggest(name, pack_names()) or f" (built-in packs: {', '.join(pack_names())})"
        raise ValueError(f"unknown pack {name!r}{hint}")
    return name


def _cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"not a network in CIDR notation: {value!r}") from None
    return value


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http(s) URL (got {value!r})")
    return value


class HttpSettings(_Strict):
    allowed_networks: list[Annotated[str, AfterValidator(_cidr)]] = Field(default_factory=list, alias="allowedNetworks")
    max_response_bytes: Annotated[int, Field(gt=0)] = Field(default=1 << 20, alias="maxResponseBytes")


class LlmSettings(_Strict):
    base_url: Annotated[str, AfterValidator(_http_url)] = Field(default="https://api.anthropic.com", alias="baseUrl")
    api_key_env: str = Field(default="ANTHROPIC_API_KEY", alias="apiKeyEnv")
    model: str = "claude-haiku-4-5"


class StreamsSettings(_Strict):
    """``hookbus.streams``: the layout of the bus (read when a gateway or dispatcher starts)."""

    #: Work streams and decision logs, each its own Redis Cluster slot; a session keeps to one.
    partitions: Annotated[int, Field(ge=1, le=1024)] = 1


class DecisionLogSettings(_Strict):
    max_length: Annotated[int, Field(gt=0)] = Field(default=1_000_000, alias="maxLength")
    max_age_seconds: Annotated[float, Field(gt=0)] | None = Field(default=7 * 86400, alias="maxAgeSeconds")


def _pointer(value: str) -> str:
    parse_pointer(value)  # ValueError with the reason
    return value


def _regex(value: str) -> str:
    compile_pattern(value)
    return value


def _builtin_detector(name: str) -> str:
    if name not in BUILTIN_NAMES:
        raise ValueError(
            f"unknown built-in detector {name!r}{suggest(name, BUILTIN_NAMES)} (one of {', '.join(BUILTIN_NAMES)})"
        )
    return name


def _detector_name(name: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.\-]{0,63}", name):
        raise ValueError(f"must be 1-64 lower-case letters, digits, '-', '_' or '.' (got {name!r})")
    return name


class RedactPattern(_Strict):
    """A policy-defined detector: a name (listed in records) and a regex."""

    name: Annotated[str, AfterValidator(_detector_name)]
    regex: Annotated[str, Field(min_length=1), AfterValidator(_regex)]


class RedactSettings(_Strict):
    """``hookbus.redact``: what is masked before a decision-log record or a dead letter is written."""

    pointers: list[Annotated[str, AfterValidator(_pointer)]] = Field(default_factory=list)
    patterns: list[RedactPattern] = Field(default_factory=list)
    builtins: bool = True
    disable: list[Annotated[str, AfterValidator(_builtin_detector)]] = Field(default_factory=list)


class AsyncSettings(_Strict):
    """``hookbus.async``: delivery of ``async`` handlers (a handler's own ``maxTries``/``maxAgeSeconds`` win)."""

    max_tries: Annotated[int, Field(ge=1, le=MAX_TRIES_LIMIT)] = Field(default=5, alias="maxTries")
    max_age_seconds: Annotated[float, Field(gt=0)] = Field(default=3600.0, alias="maxAgeSeconds")
    max_queued: Annotated[int, Field(gt=0)] = Field(default=100_000, alias="maxQueued")
    retry_delay_seconds: Annotated[float, Field(gt=0)] = Field(default=2.0, alias="retryDelaySeconds")
    #: Keep arq results this long (for inspection); 0 keeps none. Not needed to run a job once:
    #: an event's jobs are queued with its settlement (:mod:`workers.jobs.enqueue`).
    keep_result_seconds: Annotated[float, Field(ge=0)] = Field(default=0.0, alias="keepResultSeconds")


class PlatformSettings(_Strict):
    """The top-level ``hookbus:`` section."""

    deadline_seconds: Annotated[float, Field(gt=0)] = Field(default=2.0, alias="deadlineSeconds")
    deadlines: dict[Annotated[str, AfterValidator(_known_event)], Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict
    )
    stop_block_limit: Annotated[int, Field(ge=0)] = Field(default=8, alias="stopBlockLimit")
    shadow: bool = False
    plugins: list[str] = Field(default_factory=list)
    http: HttpSettings = Field(default_factory=HttpSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    decision_log: DecisionLogSettings = Field(default_factory=DecisionLogSettings, alias="decisionLog")
    streams: StreamsSettings = Field(default_factory=StreamsSettings)
    redact: RedactSettings = Field(default_factory=RedactSettings)
    async_: AsyncSettings = Field(default_factory=AsyncSettings, alias="async")
    limits: Limits = Field(default_factory=Limits)
    #: What each session remembers (facts, counters, budgets) for ``when:`` conditions.
    session: SessionSettings = Field(default_factory=SessionSettings)
    #: What a blocking event over a rate limit or in-flight budget gets: no opinion (``open``),
    #: or a deny/block saying so (``closed``); answered 200 either way (gateway.limits).
    when_limited: FailMode = Field(default="open", alias="whenLimited")
    #: Built-in packs whose handlers this file adds before its own (bus.policy.packs).
    include: list[Annotated[str, AfterValidator(_known_pack)]] = Field(default_factory=list)
    #: The agents this policy serves (the fleet): what ``hookbus policy check`` warns about.
    agents: list[AgentName] | None = None
    #: No tenant layer may disable, shadow or weaken the org's hooks (org layer only).
    org_locked: bool = Field(default=False, alias="orgLocked")
    #: ``hookbus:`` keys a tenant layer may still set under ``orgLocked`` (org layer only).
    tenant_overrides: list[str] = Field(default_factory=list, alias="tenantOverrides")
    approvals: ApprovalsSettings = Field(default_factory=ApprovalsSettings)

    def deadline_for(self, event: str) -> float:
        """The gateway's wait for a blocking ``event``, in seconds."""
        return self.deadlines.get(event, self.deadline_seconds)


Loc = tuple[str | int, ...]

_TYPE_WORDS: Final = {
    "string_type": "a string",
    "float_type": "a number",
    "int_type": "an integer",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}
_KINDS: Final = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "list",
    dict: "mapping",
    type(None): "null",
}
_BOUNDS: Final = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}


def describe_value(value: Any) -> str:
    """A short human description of a parsed value: ``string 'zsh'``, ``integer 0``, ``list``."""
    kind = _KINDS.get(type(value), type(value).__name__)
    if isinstance(value, bool):
        return f"{kind} {str(value).lower()}"
    if isinstance(value, int | float | str):
        shown = repr(value)
        return f"{kind} {shown if len(shown) <= 40 else shown[:37] + '...'}"
    return kind


def _num(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _strip_tag(loc: Loc) -> Loc:
    """Drop the discriminator tag pydantic puts after a handler's index (``hooks.0.command.x``)."""
    for i in range(len(loc) - 2):
        if loc[i] == "hooks" and isinstance(loc[i + 1], int) and loc[i + 2] in HANDLER_TYPES:
            return (*loc[: i + 2], *loc[i + 3 :])
    return loc


def human_errors(exc: ValidationError, word: str = "field") -> list[tuple[Loc, Loc, str]]:
    """Each error of ``exc`` as ``(path, path_of_its_line, message)`` in words people use.

    ``path`` is where the message applies (the parent object for unknown and missing
    fields, whose name is in the message); ``word`` names those: "field" or "key".
    Discriminator tags are dropped from handler paths.
    """
    out: list[tuple[Loc, Loc, str]] = []
    for err in exc.errors():
        kind, ctx, value = err["type"], err.get("ctx") or {}, err["input"]
        loc = at = _strip_tag(tuple(err["loc"][:-1] if err["loc"][-1:] == ("[key]",) else err["loc"]))
        if kind == "extra_forbidden":
            loc, message = loc[:-1], f"unknown {word} '{at[-1]}'"
        elif kind == "missing":
            loc = at = loc[:-1]
            message = f"missing required {word} '{err['loc'][-1]}'"
        elif kind in ("union_tag_invalid", "union_tag_not_found"):
            expected = ", ".join(HANDLER_TYPES)
            message = (
                f"unknown handler type {ctx['tag']!r} (expected {expected})"
                if "tag" in ctx
                else f"missing required field 'type' (one of {expected})"
            )
        elif kind in _TYPE_WORDS:
            message = f"must be {_TYPE_WORDS[kind]} (got {describe_value(value)})"
        elif kind in _BOUNDS:
            message = f"must be {_BOUNDS[kind]} {_num(next(iter(ctx.values())))}"
        elif kind == "string_too_short":
            n = ctx.get("min_length", 1)
            message = "must not be empty" if n == 1 else f"must be at least {n} characters"
        elif kind == "too_short" and ctx.get("min_length") == 1:
            message = "must not be empty"
        elif kind == "literal_error":
            message = f"must be {ctx['expected']} (got {describe_value(value)})"
        elif kind == "value_error":  # our own validators' messages
            message = err["msg"].removeprefix("Value error, ")
        elif kind == "string_pattern_mismatch" and loc and loc[-1] == "function":
            message = f"must name a Python callable as 'module:attr' (got {value!r})"
        else:
            message = err["msg"][:1].lower() + err["msg"][1:]
        out.append((loc, at, message))
    return out


__all__ = [
    "AgentHandler",
    "AgentName",
    "AsyncSettings",
    "CommandHandler",
    "DecisionLogSettings",
    "FunctionHandler",
    "Handler",
    "HandlerBase",
    "HttpHandler",
    "HttpSettings",
    "LlmSettings",
    "MatcherGroup",
    "McpToolHandler",
    "PlatformSettings",
    "PromptHandler",
    "RedactPattern",
    "RedactSettings",
    "RuleHandler",
    "describe_value",
    "human_errors",
    "suggest",
]
