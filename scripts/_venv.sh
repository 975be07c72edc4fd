# Sourced by the other scripts: make .venv with Python >= 3.11 and install hookbus into it.
# Each step prints one line on stderr; pip's own output goes to a log, shown only if the step fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "hookbus needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
_venv_log="$(mktemp "${TMPDIR:-/tmp}/hookbus-setup.XXXXXX")"
_venv_step() { # _venv_step WHAT COMMAND...: "setup: WHAT ... ok", or "failed" and the command's output
    local what="$1" rc=0
    shift
    printf 'setup: %s ... ' "$what" >&2
    "$@" >"$_venv_log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "failed (exit $rc):" >&2
        cat "$_venv_log" >&2
        rm -f "$_venv_log"
        exit "$rc"
    fi
    echo "ok" >&2
}
[ -x .venv/bin/python ] || _venv_step "creating .venv with $PYTHON" "$PYTHON" -m venv .venv
_venv_step "updating pip" .venv/bin/python -m pip install --disable-pip-version-check --upgrade pip
TARGET="."
[ -n "${EXTRAS:-}" ] && TARGET=".[${EXTRAS}]"
_venv_step "installing hookbus ($TARGET) and its dependencies into .venv" \
    .venv/bin/python -m pip install --disable-pip-version-check -e "$TARGET"
rm -f "$_venv_log"
unset -f _venv_step
unset _venv_log
