"""The names of Claude Code's top-level settings keys.

Generated from the ``properties`` of SchemaStore's Claude Code settings schema
(``claude-code-settings.schema.json``). The schema is not shipped with hookbus, so the
list is committed here; regenerate it with::

    python -m bus.hooks.claude_settings path/to/claude-code-settings.schema.json > new.py
    mv new.py bus/hooks/claude_settings.py

A policy file may be a whole Claude Code settings file: the keys in :data:`HOOK_KEYS` are
read, every other key of :data:`SETTINGS_KEYS` is ignored with a note.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Final

#: Every top-level key of Claude Code's settings file (SchemaStore schema ``properties``).
SETTINGS_KEYS: Final[frozenset[str]] = frozenset(
    {
        "$schema",
        "advisorModel",
        "agent",
        "agentPushNotifEnabled",
        "allowAllClaudeAiMcps",
        "allowManagedHooksOnly",
        "allowManagedMcpServersOnly",
        "allowManagedPermissionRulesOnly",
        "allowedChannelPlugins",
        "allowedHttpHookUrls",
        "allowedMcpServers",
        "alwaysThinkingEnabled",
        "apiKeyHelper",
        "askUserQuestionTimeout",
        "attribution",
        "autoCompactEnabled",
        "autoConnectIde",
        "autoInstallIdeExtension",
        "autoMemoryDirectory",
        "autoMemoryEnabled",
        "autoMode",
        "autoScrollEnabled",
        "autoUpdatesChannel",
        "availableModels",
        "awaySummaryEnabled",
        "awsAuthRefresh",
        "awsCredentialExport",
        "axScreenReader",
        "blockedMarketplaces",
        "browserExternalPageTools",
        "channelsEnabled",
        "claudeMd",
        "claudeMdExcludes",
        "cleanupPeriodDays",
        "companyAnnouncements",
        "defaultShell",
        "deniedMcpServers",
        "diffTool",
        "disableAgentView",
        "disableAllHooks",
        "disableArtifact",
        "disableAutoMode",
        "disableBrowserExternalNavigation",
        "disableBundledSkills",
        "disableClaudeAiConnectors",
        "disableDeepLinkRegistration",
        "disableMobileSimulatorTools",
        "disableRemoteControl",
        "disableSideloadFlags",
        "disableSkillShellExecution",
        "disableWorkflows",
        "disabledMcpjsonServers",
        "editorMode",
        "effortLevel",
        "emojiCompletionEnabled",
        "enableAllProjectMcpServers",
        "enableArtifact",
        "enabledMcpjsonServers",
        "enabledPlugins",
        "enforceAvailableModels",
        "env",
        "externalEditorContext",
        "extraKnownMarketplaces",
        "fallbackModel",
        "fastMode",
        "fastModePerSessionOptIn",
        "feedbackSurveyRate",
        "fileCheckpointingEnabled",
        "fileSuggestion",
        "footerLinksRegexes",
        "forceLoginGatewayUrl",
        "forceLoginMethod",
        "forceLoginOrgUUID",
        "forceRemoteSettingsRefresh",
        "gcpAuthRefresh",
        "hooks",
        "httpHookAllowedEnvVars",
        "includeCoAuthoredBy",
        "includeGitInstructions",
        "inputNeededNotifEnabled",
        "language",
        "managedMcpServers",
        "minimumVersion",
        "model",
        "modelOverrides",
        "otelHeadersHelper",
        "outputStyle",
        "parentSettingsBehavior",
        "permissionExplainerEnabled",
        "permissions",
        "plansDirectory",
        "pluginConfigs",
        "pluginSuggestionMarketplaces",
        "pluginTrustMessage",
        "policyHelper",
        "prUrlTemplate",
        "preferredNotifChannel",
        "prefersReducedMotion",
        "processWrapper",
        "remoteControlAtStartup",
        "requireCoworkFullVmSandbox",
        "requiredMaximumVersion",
        "requiredMinimumVersion",
        "respectGitignore",
        "respondToBashCommands",
        "sandbox",
        "showClearContextOnPlanAccept",
        "showThinkingSummaries",
        "showTurnDuration",
        "skillListingBudgetFraction",
        "skillListingMaxDescChars",
        "skillOverrides",
        "skipDangerousModePermissionPrompt",
        "skipWebFetchPreflight",
        "skippedMarketplaces",
        "skippedPlugins",
        "spinnerTipsEnabled",
        "spinnerTipsOverride",
        "spinnerVerbs",
        "sshConfigs",
        "sshHostAllowlist",
        "statusLine",
        "strictKnownMarketplaces",
        "strictPluginOnlyCustomization",
        "subagentStatusLine",
        "syntaxHighlightingDisabled",
        "teammateDefaultModel",
        "teammateMode",
        "terminalProgressBarEnabled",
        "theme",
        "tui",
        "useAutoModeDuringPlan",
        "verbose",
        "viewMode",
        "vimInsertModeRemaps",
        "voice",
        "voiceEnabled",
        "wheelScrollAccelerationEnabled",
        "workflowKeywordTriggerEnabled",
        "workflowSizeGuideline",
        "worktree",
        "wslInheritsWindowsSettings",
    }
)

#: The settings keys hookbus reads from a policy file; the rest are ignored with a note.
HOOK_KEYS: Final[frozenset[str]] = frozenset(
    {"$schema", "hooks", "disableAllHooks", "allowedHttpHookUrls", "httpHookAllowedEnvVars"}
)


def render(schema_path: str | Path) -> str:
    """This module's source with :data:`SETTINGS_KEYS` regenerated from a schema file."""
    schema = json.loads(Path(schema_path).read_text(encoding="utf-8"))
    keys = sorted(schema["properties"])
    here = Path(__file__).read_text(encoding="utf-8")
    head, rest = here.split("    {\n", 1)
    tail = rest.split("    }\n)\n", 1)[1]
    lines = "".join(f'        "{key}",\n' for key in keys)
    return f"{head}    {{\n{lines}    }}\n)\n{tail}"


def main(argv: list[str] | None = None) -> int:
    """``python -m bus.hooks.claude_settings SCHEMA.json``: print the regenerated module."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bus.hooks.claude_settings SCHEMA.json", file=sys.stderr)
        return 2
    sys.stdout.write(render(args[0]))
    return 0


__all__ = ["HOOK_KEYS", "SETTINGS_KEYS", "render"]

if __name__ == "__main__":
    raise SystemExit(main())
