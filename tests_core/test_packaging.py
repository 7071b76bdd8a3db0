"""pyproject.toml lists every package the wheel must carry, the migrations included.

The package list is explicit (not found by a search) because the top-level `migrations/` folder
ships as `orderflow_pg.migrations`; these checks fail when a package added on disk is missing
from the list, or when the mapping points at a folder without the migration files.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
SHIPPED_DATA = {".py", ".sql", ".html", ".js", ".css"}


def _folder(package: str) -> Path:
    mapped = SETUPTOOLS.get("package-dir", {})
    if package in mapped:
        return ROOT / mapped[package]
    return ROOT.joinpath(*package.split("."))


def _packages_on_disk() -> set[str]:
    tops = {name for name in SETUPTOOLS["packages"] if "." not in name}
    found = set()
    for top in tops:
        for folder in [ROOT / top, *(ROOT / top).rglob("*")]:
            if not folder.is_dir() or folder.name == "__pycache__":
                continue
            if any(f.suffix in SHIPPED_DATA for f in folder.iterdir() if f.is_file()):
                found.add(".".join(folder.relative_to(ROOT).parts))
    return found


def test_every_package_folder_with_code_or_data_is_listed() -> None:
    listed = set(SETUPTOOLS["packages"])
    assert _packages_on_disk() - listed == set(), "add these to [tool.setuptools] packages"


def test_every_listed_package_has_its_folder() -> None:
    missing = [name for name in SETUPTOOLS["packages"] if not _folder(name).is_dir()]
    assert missing == []


def test_the_migrations_ship_from_the_top_level_folder() -> None:
    folder = _folder("orderflow_pg.migrations")
    assert folder == ROOT / "migrations"
    names = sorted(p.name for p in folder.glob("*.sql") if p.name != "schema.sql")
    assert names, "no migration files in migrations/"
    assert all(re.fullmatch(r"\d{4}_[a-z0-9_]+\.sql", n) for n in names), names
    assert names[0] == "0001_initial.sql"
    assert (folder / "__init__.py").is_file(), "editable installs import it as a package"
    assert not (ROOT / "orderflow_pg" / "migrations").exists(), "the old folder came back"


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_distribution_name_is_ours_and_the_command_and_packages_keep_theirs() -> None:
    # `orderflow` on the package index is an unrelated project: `pip install orderflow[...]`
    # would install it. The command and the import packages keep the name `orderflow`.
    from orderflow import DISTRIBUTION

    assert PROJECT["name"] == DISTRIBUTION != "orderflow"
    assert PROJECT["scripts"] == {"orderflow": "orderflow.entry:main"}
    assert "orderflow" in SETUPTOOLS["packages"]
    # The extras that pull in other extras name this distribution, not the foreign one.
    extras = set(PROJECT["optional-dependencies"])
    nested = [
        r
        for reqs in PROJECT["optional-dependencies"].values()
        for r in reqs
        if "orderflow" in r.partition("[")[0]
    ]
    assert len(nested) >= 3
    for requirement in nested:
        name, _, wanted = requirement.partition("[")
        assert name == DISTRIBUTION, requirement
        assert set(wanted.rstrip("]").split(",")) <= extras, requirement


def _third_party_imports(folder: Path) -> set[str]:
    """Top-level modules the package's sources import that are neither ours nor stdlib."""
    import ast
    import sys

    ours = {name.partition(".")[0] for name in SETUPTOOLS["packages"]}
    found: set[str] = set()
    for source in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.partition(".")[0])
    return found - ours - set(sys.stdlib_module_names)


def test_the_testing_extra_installs_what_the_kit_and_its_readme_example_need() -> None:
    testing = _requirement_names(PROJECT["optional-dependencies"]["testing"])
    core = _requirement_names(PROJECT["dependencies"])
    assert _third_party_imports(ROOT / "orderflow_testing") <= testing | core
    # README's example ends in a TestCase that "pytest collects": the extra brings pytest.
    heading = "### Property-testing your own store"
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    [page] = [p.read_text() for p in pages if heading in p.read_text()]
    assert "pytest collects" in page.split(heading)[1].split("\n#")[0]
    assert "pytest" in testing
