"""Statements per order: the `orderflow_db_statements_total` counters (by query name) of the API
and of each worker, read from their `/metrics` when a run's load starts and when it ends.

PostgreSQL cannot count statements here without `pg_stat_statements` (a restart), so each
process counts what its store sends; BEGIN and COMMIT are not among them (transactions are
counted by the server, `xacts/order`). The two scrapes of the API each run its two small probe
queries, a handful of transactions in a run of thousands of orders.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

SAMPLE = "orderflow_db_statements_total"


def parse(text: str) -> Counter[str]:
    """The statement counters of one `/metrics` page, by statement name."""
    sent: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == SAMPLE:
                sent[sample.labels["statement"]] += int(sample.value)
    return sent


async def read(urls: list[str]) -> Counter[str] | None:
    """The counters summed over the processes at `urls` (base URLs); None if one of them serves
    no such counters (metrics off, or a checkout from before they existed)."""
    total: Counter[str] = Counter()
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for url in urls:
            try:
                async with session.get(f"{url}/metrics") as reply:
                    if reply.status != 200:
                        return None
                    sent = parse(await reply.text())
            except (aiohttp.ClientError, TimeoutError):
                return None
            if not sent:
                return None
            total += sent
    return total


def per_order(start: Counter[str] | None, end: Counter[str] | None, orders: int) -> dict[str, Any]:
    """`statements_per_order` and, by name, `statements_by_name_per_order` (largest first)."""
    if start is None or end is None or not orders:
        return {"statements_per_order": None}
    sent = end.copy()
    sent.subtract(start)
    return {
        "statements_per_order": round(sum(sent.values()) / orders, 2),
        "statements_by_name_per_order": {
            name: round(n / orders, 2) for name, n in sent.most_common() if n > 0
        },
    }
