"""The benchmark's reading of PostgreSQL's CPU: it finds the server's postmaster through a
backend of its own, and its counter grows with work done on the server."""

from __future__ import annotations

import psycopg
import pytest

from bench import cpu

pytestmark = pytest.mark.postgres


def test_the_postmaster_is_found_every_time_and_counts_a_query(admin_url: str) -> None:
    first = cpu.locate_postgres(admin_url)
    if first.postmaster is None:
        pytest.skip(f"PostgreSQL's processes are not readable here: {first.note}")
    # The backend that answered exits when its connection closes; a lookup that read it only
    # after closing found nothing now and then. Each of these lookups must find the same root.
    found = {cpu.locate_postgres(admin_url).postmaster for _ in range(30)}
    assert found == {first.postmaster}
    with psycopg.connect(admin_url, autocommit=True) as conn:
        before = cpu.postgres_cpu_s(first.postmaster)
        conn.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchone()
        # Read while the backend lives (a closed one counts only once the server reaped it).
        assert cpu.postgres_cpu_s(first.postmaster) > before
