"""The bench's own virtual environment (bench/.peer-venv): the peers, the plotter, the profiler.

None of it is a dependency of orderflow: the bench installs it here with pip on first use.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

VENV = Path(__file__).resolve().parent / ".peer-venv"
PACKAGES = (
    "pgqueuer==1.6.0",
    "asyncpg>=0.29",
    "procrastinate==3.10.0",
    "dbos==3.4.0",
    "psycopg[binary]>=3.2",
    "aiohttp>=3.10",
    "matplotlib>=3.8",
    "py-spy>=0.4",
)


def python() -> Path:
    return VENV / "bin" / "python"


def tool(name: str) -> Path | None:
    path = VENV / "bin" / name
    return path if path.exists() else None


def ensure() -> bool:
    """Create the venv and install PACKAGES (pip skips what is already there); ok or not."""
    try:
        if not python().exists():
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
        subprocess.run(
            [str(python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             *PACKAGES],
            check=True, timeout=900, capture_output=True, text=True,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        print(f"  cannot prepare {VENV}: {str(detail)[-800:]}")
        return False
    return True


def versions() -> dict[str, str]:
    """Installed versions of the peers, as the report names them."""
    code = (
        "import importlib.metadata as m, json;"
        "names = ('pgqueuer', 'asyncpg', 'procrastinate', 'dbos', 'psycopg', 'aiohttp');"
        "print(json.dumps({p: m.version(p) for p in names}))"
    )
    done = subprocess.run([str(python()), "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    return json.loads(done.stdout) if done.returncode == 0 else {}
