"""Packaging: ``pip install .`` must not print setuptools deprecation warnings.

Building needs setuptools from PyPI (pip's isolated build), which the suite cannot rely on, so
this holds the two settings that decide it: the SPDX ``license`` string (a TOML table is
deprecated) and a setuptools that reads it (77 or later).
"""

from __future__ import annotations

import re
import tomllib

from tests.conftest import REPO


def test_the_license_is_an_spdx_expression_that_setuptools_reads() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    (setuptools,) = [r for r in project["build-system"]["requires"] if r.startswith("setuptools")]
    found = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", setuptools)
    assert found is not None and int(found[1]) >= 77
    assert not any("License ::" in c for c in project["project"].get("classifiers", []))  # conflicts with PEP 639
