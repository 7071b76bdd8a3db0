"""The operator's view of the whole: the attention queue and the order counts.

Kept apart from `handlers` so the list's ordinary path stays as it is: `GET /api/v1/orders`
hands over here only when `needs_attention=true` is asked for.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from orderflow_core.model import Principal
from orderflow_core.ports import OrderCount
from orderflow_core.states import AttentionReason, OrderState
from orderflow_http.api import appkeys, parse, serialize
from orderflow_http.api.serialize import dumps


async def waiting_orders(
    request: web.Request, principal: Principal, params: Mapping[str, str], default_limit: int
) -> web.Response:
    """GET /api/v1/orders?needs_attention=true: newest waiting first (customers: their own)."""
    orders, next_cursor = await request.app[appkeys.SERVICE].waiting_orders(
        principal,
        state=params.get("state"),
        limit=parse.query_int(params, "limit", default_limit),
        cursor=params.get("cursor"),
    )
    return web.json_response(serialize.order_page(orders, next_cursor), dumps=dumps)


def counts(found: list[OrderCount]) -> dict[str, object]:
    """The body of GET /api/v1/stats/orders: every state and every reason, zeros included."""
    by_state = dict.fromkeys((s.value for s in OrderState), 0)
    by_reason = dict.fromkeys((r.value for r in AttentionReason), 0)
    for count in found:
        by_state[count.state.value] += count.orders
        if count.reason is not None:
            by_reason[count.reason] = by_reason.get(count.reason, 0) + count.orders
    return {
        "total": sum(by_state.values()),
        "by_state": by_state,
        "waiting": sum(by_reason.values()),
        "waiting_by_reason": by_reason,
    }
