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
