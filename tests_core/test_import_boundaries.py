"""The dependency rule, read from the source: the core needs only the standard library and
attrs; adapters import the core, never each other; only `orderflow/` imports everything."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = {
    "orderflow", "orderflow_core", "orderflow_pg", "orderflow_http", "orderflow_mocks",
    "orderflow_testing", "orderflow_nats",
}
ALLOWED = {
    "orderflow_core": {"orderflow_core", "attrs"},
    "orderflow_pg": {"orderflow_core", "orderflow_pg"},
    "orderflow_http": {"orderflow_core", "orderflow_http"},
    "orderflow_mocks": {"orderflow_core", "orderflow_mocks"},
    # The property-testing kit tests the core (and any store an embedder hands it).
    "orderflow_testing": {"orderflow_core", "orderflow_mocks", "orderflow_testing"},
    "orderflow_nats": {"orderflow_core", "orderflow_nats"},
}

# Under `mutmut run` every mutated core module imports mutmut's trampoline; nowhere else.
MUTATION_TOOL = {"mutmut"} if "MUTANT_UNDER_TEST" in os.environ else set()


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def modules_of(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_the_dependency_rule_allows(package: str) -> None:
    assert modules_of(package), f"{package} has no modules"
    for path in modules_of(package):
        roots = imported_roots(path)
        ours = roots & OURS
        assert ours <= ALLOWED[package], (path, ours - ALLOWED[package])
        if package == "orderflow_core":
            foreign = {r for r in roots - ALLOWED[package] - {"__future__"} - MUTATION_TOOL
                       if r not in sys.stdlib_module_names}
            assert not foreign, (path, foreign)


# The pure simulation the mocks serve over HTTP (and tests run in-process): stdlib and attrs only.
PURE_SIMULATOR = ("simulation", "sim_scripts", "sim_wire", "sim_world")


@pytest.mark.parametrize("module", PURE_SIMULATOR)
def test_the_simulator_imports_only_the_standard_library_and_attrs(module: str) -> None:
    roots = imported_roots(ROOT / "orderflow_mocks" / f"{module}.py")
    foreign = {r for r in roots - {"__future__", "attrs", "orderflow_mocks"}
               if r not in sys.stdlib_module_names}
    assert not foreign, (module, foreign)


def test_the_boundary_check_would_notice_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("import psycopg\nfrom orderflow_pg.store import PgOrderStore\n")
    assert imported_roots(module) == {"psycopg", "orderflow_pg"}


def test_every_core_module_imports_with_psycopg_aiohttp_and_nats_unavailable() -> None:
    names = [
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in modules_of("orderflow_core")
    ]
    program = (
        "import sys\n"
        "for blocked in ('psycopg', 'psycopg_pool', 'aiohttp', 'nats'):\n"
        "    sys.modules[blocked] = None\n"
        "import importlib\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(len(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr


def test_the_simulator_imports_with_aiohttp_unavailable() -> None:
    program = (
        "import sys\n"
        "for blocked in ('psycopg', 'psycopg_pool', 'aiohttp', 'nats'):\n"
        "    sys.modules[blocked] = None\n"
        "import orderflow_mocks.sim_adapters, orderflow_mocks.simulation\n"
        "orderflow_mocks.sim_adapters.simulated_services(orderflow_mocks.simulation.Simulator())\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr


def test_the_cores_errors_carry_a_code_and_no_transport_status() -> None:
    from orderflow_core import errors

    leaves = [
        e for e in vars(errors).values()
        if isinstance(e, type) and issubclass(e, errors.OrderflowError)
    ]
    assert len(leaves) > 10
    assert not [e.__name__ for e in leaves if hasattr(e, "status")]
    codes = [e.code for e in leaves]
    assert len(codes) == len(set(codes))
