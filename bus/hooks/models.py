"""Pydantic models at the edges: Claude Code hook input and hook output.

Input is lenient, as Claude Code's own evolves every week: only ``hook_event_name`` and
``session_id`` are required, every known field is typed and optional, and unknown fields
are kept. Output uses Claude Code's wire names (camelCase, ``continue``) through aliases;
``hookSpecificOutput`` keeps whatever fields the event defines (see :mod:`bus.hooks.output` for
the per-event checks applied to handler answers).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class HookInput(BaseModel):
    """One hook input object (what a command hook reads on stdin)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    hook_event_name: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    transcript_path: str | None = None
    cwd: str | None = None
    permission_mode: str | None = None
    prompt_id: str | None = None
    agent_id: str | None = None
    agent_type: str | None = None
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    tool_response: Any = None
    tool_use_id: str | None = None
    prompt: str | None = None
    stop_hook_active: bool | None = None
    last_assistant_message: str | None = None
    source: str | None = None
    reason: str | None = None
    message: str | None = None
    error: Any = None

    @field_validator("hook_event_name", "session_id", mode="before")
    @classmethod
    def _must_be_text(cls, value: Any) -> Any:
        if not isinstance(value, str):
            raise ValueError("must be a string")
        return value

    @property
    def extra_fields(self) -> dict[str, Any]:
        """Fields hookbus does not model, kept as sent."""
        return dict(self.__pydantic_extra__ or {})

    def to_wire(self) -> dict[str, Any]:
        """The input as Claude Code sends it (unset fields left out)."""
        return self.model_dump(exclude_none=True)


class HookSpecificOutput(BaseModel):
    """``hookSpecificOutput``: ``hookEventName`` plus the event's own fields."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    hook_event_name: str = Field(alias="hookEventName")
    permission_decision: Literal["allow", "deny", "ask", "defer"] | None = Field(
        default=None, alias="permissionDecision"
    )
    permission_decision_reason: str | None = Field(default=None, alias="permissionDecisionReason")
    updated_input: dict[str, Any] | None = Field(default=None, alias="updatedInput")
    additional_context: str | None = Field(default=None, alias="additionalContext")


class HookOutput(BaseModel):
    """One hook output object (what a command hook prints, or an http hook returns)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    continue_: bool | None = Field(default=None, alias="continue")
    stop_reason: str | None = Field(default=None, alias="stopReason")
    suppress_output: bool | None = Field(default=None, alias="suppressOutput")
    system_message: str | None = Field(default=None, alias="systemMessage")
    decision: Literal["block", "approve"] | None = None
    reason: str | None = None
    hook_specific_output: HookSpecificOutput | None = Field(default=None, alias="hookSpecificOutput")

    def to_wire(self) -> dict[str, Any]:
        """The output with Claude Code's field names, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True)

    @property
    def blocked(self) -> bool:
        """Deny on PreToolUse, ``decision: block`` elsewhere, or ``continue: false``."""
        specific = self.hook_specific_output
        return (
            self.continue_ is False
            or self.decision == "block"
            or (specific is not None and specific.permission_decision == "deny")
        )


__all__ = ["HookInput", "HookOutput", "HookSpecificOutput"]
