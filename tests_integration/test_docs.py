"""The documentation site's reference pages are generated from the code (`python -m
orderflow.docgen`): a committed page that differs from what the code generates now fails here,
as does an item of the code (a variable, a flag, an endpoint, a metric, a problem code) that has
no heading of its own to be found by."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orderflow import docgen
from orderflow.cli import build_parser
from orderflow.config import VARIABLE_HELP, known_variables
from orderflow_http.api.openapi import document
from orderflow_http.api.problems import TITLES

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"


def anchors(page: str) -> set[str]:
    """The explicit heading anchors (`{ #id }`) of a reference page."""
    return set(re.findall(r"\{ #([\w-]+) \}$", (REFERENCE / page).read_text(), re.MULTILINE))


def test_the_committed_reference_pages_are_what_the_code_generates() -> None:
    stale = docgen.stale(ROOT)
    assert stale == [], f"stale: {stale}; run `python -m orderflow.docgen` and commit the pages"


def test_a_changed_or_missing_page_is_reported_stale(tmp_path: Path) -> None:
    shutil.copytree(REFERENCE, tmp_path / "docs" / "reference")
    assert docgen.stale(tmp_path) == []
    metrics = tmp_path / "docs" / "reference" / "metrics.md"
    metrics.write_text(metrics.read_text().replace("orderflow_claims", "orderflow_claimz"))
    (tmp_path / "docs" / "reference" / "cli.md").unlink()
    assert docgen.stale(tmp_path) == ["cli.md", "metrics.md"]
    done = subprocess.run(
        [sys.executable, "-m", "orderflow.docgen", "--check", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "docs/reference/metrics.md" in done.stderr
    assert "docs/reference/cli.md" in done.stderr


def test_every_variable_is_described_and_has_its_own_heading() -> None:
    undescribed = sorted(known_variables() - set(VARIABLE_HELP))
    assert undescribed == [], f"add these to orderflow.config.VARIABLE_HELP: {undescribed}"
    assert sorted(set(VARIABLE_HELP) - known_variables()) == []  # no stale entry either
    found = anchors("configuration.md")
    assert {docgen._anchor(name) for name in known_variables()} <= found


def test_every_command_and_flag_has_its_own_heading() -> None:
    found = anchors("cli.md")
    assert "orderflow-user-add-role" in found
    assert "orderflow-user-list-json" in found
    for name, _help, sub in docgen._subcommands(build_parser()):
        assert docgen._anchor(f"orderflow {name}") in found
        for action in docgen._options(sub):
            assert docgen._anchor(f"orderflow {name} {docgen.flag_of(action)}") in found


def test_every_operation_and_schema_of_the_served_document_has_its_own_heading() -> None:
    doc = document()
    found = anchors("api.md")
    for path, item in doc["paths"].items():
        for method in item:
            if method in ("get", "post"):
                assert docgen._anchor(f"{method.upper()} {path}") in found
    for name in doc["components"]["schemas"]:
        assert docgen._anchor(f"schema {name}") in found


def test_every_metric_of_the_registry_has_its_own_heading() -> None:
    prom = pytest.importorskip("prometheus_client")
    from orderflow_http.telemetry import Telemetry

    telemetry = Telemetry(metrics=True, tracing=False, pool_stats=dict, statements=dict)
    names = {metric.name for metric in telemetry.registry.collect()}
    assert prom is not None
    assert "orderflow_claims" in names
    assert {docgen._anchor(name) for name in names} <= anchors("metrics.md")


def test_every_problem_code_has_its_own_heading_and_status() -> None:
    page = (REFERENCE / "problems.md").read_text()
    assert {docgen._anchor(code) for code in TITLES} <= anchors("problems.md")
    statuses, answered_by = docgen._where_answered()
    assert {docgen._anchor(code) for code in {*statuses, *answered_by}} <= anchors("problems.md")
    assert "| [`not_found`](#not-found) | 404 |" in page
    assert "| [`store_unavailable`](#store-unavailable) | 503 |" in page


def test_the_embedding_guide_shows_the_snippet_readme_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- readme-test: embedding -->\n```python\n(.*?)^```", readme, re.S | re.M)
    assert block is not None
    assert block[1] in (ROOT / "docs" / "how-to" / "embed.md").read_text()
