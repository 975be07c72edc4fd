"""Pydantic models of a policy file: Claude Code's ``hooks`` format plus hookbus's extensions.

Handlers are validated at least as strictly as SchemaStore's Claude Code settings schema:
unknown fields, wrong types, bad enum values and non-positive timeouts are errors. Field
names on the wire are Claude Code's (camelCase, ``if``, ``async``); in Python they are
snake_case.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FailMode = Literal["open", "closed"]


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


class CommandHandler(HandlerBase):
    """Claude Code's ``command`` hook: shell form, or exec form when ``args`` is set."""

    type: Literal["command"]
    command: Annotated[str, Field(min_length=1)]
    args: list[str] | None = None
    shell: Literal["bash", "powershell"] | None = None
    async_rewake: bool = Field(default=False, alias="asyncRewake")


class HttpHandler(HandlerBase):
    """Claude Code's ``http`` hook: POST the input JSON to ``url``."""

    type: Literal["http"]
    url: Annotated[str, Field(min_length=1)]
    headers: dict[str, str] = Field(default_factory=dict)
    allowed_env_vars: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, alias="allowedEnvVars")


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
    hooks: list[Handler]


class HttpSettings(_Strict):
    allowed_networks: list[str] = Field(default_factory=list, alias="allowedNetworks")
    max_response_bytes: Annotated[int, Field(gt=0)] = Field(default=1 << 20, alias="maxResponseBytes")


class LlmSettings(_Strict):
    base_url: str = Field(default="https://api.anthropic.com", alias="baseUrl")
    api_key_env: str = Field(default="ANTHROPIC_API_KEY", alias="apiKeyEnv")
    model: str = "claude-haiku-4-5"


class DecisionLogSettings(_Strict):
    max_length: Annotated[int, Field(gt=0)] = Field(default=1_000_000, alias="maxLength")
    max_age_seconds: Annotated[float, Field(gt=0)] | None = Field(default=7 * 86400, alias="maxAgeSeconds")


class PlatformSettings(_Strict):
    """The top-level ``hookbus:`` section."""

    deadline_seconds: Annotated[float, Field(gt=0)] = Field(default=2.0, alias="deadlineSeconds")
    deadlines: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    stop_block_limit: Annotated[int, Field(ge=0)] = Field(default=8, alias="stopBlockLimit")
    shadow: bool = False
    plugins: list[str] = Field(default_factory=list)
    http: HttpSettings = Field(default_factory=HttpSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    decision_log: DecisionLogSettings = Field(default_factory=DecisionLogSettings, alias="decisionLog")

    def deadline_for(self, event: str) -> float:
        """The gateway's wait for a blocking ``event``, in seconds."""
        return self.deadlines.get(event, self.deadline_seconds)


__all__ = [
    "AgentHandler",
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
    "RuleHandler",
]
