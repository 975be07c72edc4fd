# Sourced by the other scripts: make .venv with Python >= 3.11 and install hookbus into it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "hookbus needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
TARGET="."
[ -n "${EXTRAS:-}" ] && TARGET=".[${EXTRAS}]"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$TARGET"
