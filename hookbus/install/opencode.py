"""``hookbus install opencode``: hookbus's OpenCode plugin, written where OpenCode loads plugins.

OpenCode has no external hooks, only in-process plugins. This writes hookbus's plugin
(``opencode_plugin.js``, plain JavaScript with no dependency) with the gateway URL, the
deadline (``--timeout``, in milliseconds in the plugin) and ``--fail-closed`` baked in; the
token is read from ``$HOOKBUS_TOKEN`` when OpenCode runs and never written. Where:

* ``--scope project``: ``.opencode/plugins/hookbus.js`` here.
* ``--scope user``: ``plugins/hookbus.js`` in ``$OPENCODE_CONFIG_DIR`` when set (OpenCode then
  reads that folder too), else in ``$XDG_CONFIG_HOME/opencode`` (default ``~/.config/opencode``).
* ``--scope managed``: ``plugins/hookbus.js`` in OpenCode's managed folder (``/etc/opencode`` on
  Linux; ``$OPENCODE_TEST_MANAGED_CONFIG_DIR``, which OpenCode itself honours, overrides it),
  listed as a ``file://`` entry in that folder's ``opencode.json`` ``plugin`` array: OpenCode
  reads plugin folders only from its config folders, and the managed folder only for its
  ``opencode.json``.
* ``--settings-file PATH``: the plugin file itself.

The plugin is hookbus's by its first line. Installing again rewrites it only when something
changed (a ``.bak`` keeps the previous version); ``--uninstall`` deletes it and removes the
``file://`` entry it added, and nothing else. A file of the same name that is not hookbus's is
never overwritten. After writing it warns about what would make OpenCode silently skip it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bus.dialects.opencode import OPENCODE_EVENTS
from bus.errors import ConfigError
from hookbus.install.command import check
from hookbus.install.settings_file import TOKEN_ENV, event_names, print_diff, read_settings, write_atomically
from hookbus.shim import hook_url

PLUGIN_NAME = "hookbus.js"
#: The first line of every plugin hookbus writes: how an install recognises its own file.
MARKER = "// hookbus: this plugin was written by `hookbus install opencode`"
MANAGED_DIRS = {
    "linux": "/etc/opencode",
    "darwin": "/Library/Application Support/opencode",
    "win32": "C:\\ProgramData\\opencode",
}
#: Claude Code's names ``--events`` takes, -> the OpenCode events the plugin posts for them.
EVENTS_BY_CLAUDE_NAME = {claude: agent for agent, claude in OPENCODE_EVENTS.items()}


def config_dir() -> Path:
    """OpenCode's per-user config folder: ``$OPENCODE_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/opencode``."""
    if found := os.environ.get("OPENCODE_CONFIG_DIR"):
        return Path(found).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".config") / "opencode"


def managed_dir(platform: str = sys.platform) -> Path:
    """OpenCode's managed (system) config folder."""
    if found := os.environ.get("OPENCODE_TEST_MANAGED_CONFIG_DIR"):
        return Path(found)
    key = "linux" if platform.startswith("linux") else platform
    if key not in MANAGED_DIRS:
        raise ConfigError(f"OpenCode has no known managed config folder on {platform}; use --settings-file")
    return Path(MANAGED_DIRS[key])


def plugin_path(scope: str, cwd: Path | None = None) -> Path:
    """Where the plugin goes for ``scope`` (``project``, ``user`` or ``managed``)."""
    if scope == "project":
        return (cwd or Path.cwd()) / ".opencode" / "plugins" / PLUGIN_NAME
    if scope == "user":
        return config_dir() / "plugins" / PLUGIN_NAME
    if scope == "managed":
        return managed_dir() / "plugins" / PLUGIN_NAME
    raise ConfigError(f"unknown scope {scope!r} (project, user or managed)")


def chosen_events(named: list[str] | None) -> tuple[str, ...]:
    """The OpenCode events the plugin posts: ``--events`` (OpenCode's or Claude Code's names) or all."""
    picked: dict[str, None] = {}
    unknown = []
    for name in event_names(named):
        event = EVENTS_BY_CLAUDE_NAME.get(name, name)
        if event in OPENCODE_EVENTS:
            picked[event] = None
        else:
            unknown.append(name)
    if unknown:
        known = ", ".join(f"{claude} ({agent})" for agent, claude in OPENCODE_EVENTS.items())
        raise ConfigError(f"not events hookbus's OpenCode plugin posts: {', '.join(unknown)} (known: {known})")
    return tuple(picked) or tuple(OPENCODE_EVENTS)


def render_plugin(url: str, *, timeout_s: float, fail_closed: bool, events: tuple[str, ...]) -> str:
    """The plugin's text with the gateway URL, deadline, failure mode and events baked in."""
    template = resources.files("hookbus.install").joinpath("opencode_plugin.js").read_text(encoding="utf-8")
    text = (
        template.replace('"__HOOKBUS_URL__"', json.dumps(url))
        .replace("__HOOKBUS_FAIL_CLOSED__", "true" if fail_closed else "false")
        .replace("__HOOKBUS_TIMEOUT_MS__", str(max(1, round(timeout_s * 1000))))
        .replace("__HOOKBUS_EVENTS__", json.dumps(list(events)))
    )
    return text


def is_hookbus_plugin(text: str | None) -> bool:
    return text is not None and text.startswith(MARKER)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _listed(config: dict[str, Any], entry: str, wanted: bool) -> dict[str, Any]:
    """``config`` with ``entry`` in (or out of) its ``plugin`` array; the input is not modified."""
    plugins = config.get("plugin")
    if plugins is not None and not isinstance(plugins, list):
        raise ConfigError("the managed opencode.json's 'plugin' is not a list; fix it by hand first")
    current = list(plugins or [])
    if wanted and entry not in current:
        return {**config, "plugin": [*current, entry]}
    if not wanted and entry in current:
        kept = [p for p in current if p != entry]
        result = {**config, "plugin": kept}
        if not kept:
            del result["plugin"]
        return result
    return config


def read_settings_text(text: str) -> Any:
    """``text`` parsed as JSON (None when it does not parse)."""
    try:
        return json.loads(text or "{}")
    except ValueError:
        return None


def warnings(path: Path, scope: str) -> list[str]:
    """What would make OpenCode silently not run the plugin at ``path``."""
    found = []
    if os.environ.get("OPENCODE_PURE", "").lower() in ("1", "true"):
        found.append("OPENCODE_PURE is set here: OpenCode then loads no plugin, hookbus's included")
    found.append("`opencode --pure` loads no plugin, hookbus's included: never run it where policy must apply")
    if scope == "project" and os.environ.get("OPENCODE_DISABLE_PROJECT_CONFIG", "").lower() in ("1", "true"):
        found.append("OPENCODE_DISABLE_PROJECT_CONFIG is set here: OpenCode then skips the project's .opencode plugins")
    folder = path.parent.parent
    if scope != "managed" and not (folder / "node_modules" / "@opencode-ai" / "plugin").is_dir():
        found.append(
            f"OpenCode npm-installs @opencode-ai/plugin into {folder} when it starts and loads plugins only after "
            "that: without network access, set npm_config_offline=true where OpenCode runs or each start waits"
        )
    found.append(
        "OpenCode only logs a plugin that fails to load (in its log folder, or with --print-logs): "
        "check that hookbus's decisions appear (hookbus tail) after the first tool call"
    )
    return found


def _scope_of(path: Path) -> str:
    if path.parent.name in ("plugins", "plugin") and path.parent.parent.name == ".opencode":
        return "project"
    try:
        if path.resolve().is_relative_to(managed_dir().resolve()):
            return "managed"
    except ConfigError:
        pass
    return "user"


def run(args: Any) -> int:
    """``hookbus install opencode``: returns the exit code (errors a user makes raise ConfigError)."""
    if args.shim or args.hook_command:
        flag = "--shim" if args.shim else "--hook-command"
        raise ConfigError(f"{flag} does not apply to OpenCode: it has no command hooks, its plugin posts itself")
    path = Path(args.settings_file) if args.settings_file else plugin_path(args.scope)
    if args.settings_file and not path.parent.is_dir() and not args.create and not args.dry_run and not args.check:
        raise ConfigError(f"{path.parent} does not exist (a typo?); pass --create to make it")
    old_text = _read(path)
    if old_text is not None and not is_hookbus_plugin(old_text):
        raise ConfigError(f"{path} exists and is not hookbus's plugin; move it away or pick another --settings-file")
    baked = re.search(r'^const HOOKBUS_URL = "(.*)"$', old_text or "", re.MULTILINE)
    url = hook_url(args.url or (baked[1] if baked and args.check else "") or os.environ.get("HOOKBUS_URL") or "")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--url must be an http(s) URL such as http://hookbus.internal:8787 (got {args.url!r})")
    url = url.split("?")[0]
    if args.check:
        return check(url, after_install=False)
    if not args.timeout > 0:
        raise ConfigError("--timeout must be more than 0 seconds")
    events = chosen_events(args.events)
    scope = _scope_of(path) if args.settings_file else args.scope
    config_path = path.parent.parent / "opencode.json" if scope == "managed" and not args.settings_file else None
    config_text, config = read_settings(config_path) if config_path else (None, {})
    entry = path.resolve().as_uri()
    if args.uninstall:
        new_text = None
        new_config = _listed(config, entry, wanted=False)
    else:
        new_text = render_plugin(url, timeout_s=args.timeout, fail_closed=args.fail_closed, events=events)
        new_config = _listed(config, entry, wanted=True)
    config_changes = config_path is not None and new_config != config
    if new_text == old_text and not config_changes:
        print(f"hookbus: {path} is already up to date; nothing to change")
        if args.uninstall:
            return 0
    elif args.dry_run:
        if new_text != old_text:
            print_diff(path, old_text, new_text)
        if config_changes and config_path is not None:
            print_diff(config_path, config_text, json.dumps(new_config, indent=2) + "\n")
        return 0
    else:
        if new_text != old_text:
            if new_text is None:
                path.unlink()
            else:
                write_atomically(path, new_text, backup=old_text is not None, follow_link=True)
        if config_changes and config_path is not None:
            bak = _read(config_path.with_name(config_path.name + ".bak")) if args.uninstall else None
            if args.uninstall and not new_config and bak is None:
                config_path.unlink()  # it held only hookbus's entry: the install made it
            else:
                before = bak is not None and read_settings_text(bak) == new_config
                new_config_text = bak if before and bak is not None else json.dumps(new_config, indent=2) + "\n"
                write_atomically(config_path, new_config_text, backup=config_text is not None, follow_link=True)
        if args.uninstall:
            print(f"hookbus: removed hookbus's OpenCode plugin {path}")
            if config_changes:
                print(f"hookbus: removed its entry from {config_path}")
            return 0
        backup = f" (previous version: {path}.bak)" if old_text is not None else ""
        mode = "fails closed" if args.fail_closed else "fails open"
        print(f"hookbus: {path}: OpenCode plugin for {len(events)} events -> {url} ({mode}){backup}")
        if config_changes:
            print(f"hookbus: {config_path}: plugin entry {entry}")
        print(f"hookbus: the plugin sends ${TOKEN_ENV} as the bearer token: export it where OpenCode runs")
    for warning in warnings(path, scope):
        print(f"hookbus: warning: {warning}", file=sys.stderr)
    return 0 if args.no_check or args.dry_run else check(url, after_install=True)


__all__ = ["MARKER", "chosen_events", "config_dir", "managed_dir", "plugin_path", "render_plugin", "run", "warnings"]
