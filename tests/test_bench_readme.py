"""``bench/README.md`` names every module in ``bench/``, and names none that is gone."""

from __future__ import annotations

import re

from tests.conftest import REPO


def test_every_bench_module_has_a_line_in_the_readme() -> None:
    readme = (REPO / "bench" / "README.md").read_text()
    named = set(re.findall(r"`([a-z0-9_]+\.py)`", readme))
    modules = {path.name for path in (REPO / "bench").glob("*.py")}
    assert sorted(modules - named) == []
    assert sorted(name for name in named - modules if not name.startswith("test_")) == []
