"""Seed data: three products, and four orders of which three are placed and not invoiced yet.

The placed orders span three days on purpose: the export takes every placed order without an
invoice, not "yesterday's", so the order of a night whose export failed still goes out.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from leaselock.integrations.sqlalchemy import unfenced

from .models import Order, OrderStatus, Product

PRODUCTS: Final[tuple[dict[str, Any], ...]] = (
    {"id": "salmon-kibble-2kg", "name": "Salmon kibble, 2 kg", "price_cents": 2499,
     "in_stock": 12},
    {"id": "chicken-pate-12x85g", "name": "Chicken pâté, 12 x 85 g", "price_cents": 1899,
     "in_stock": 40},
    {"id": "sisal-scratching-post", "name": "Sisal scratching post", "price_cents": 3450,
     "in_stock": 7},
)  # fmt: skip

# (order id, user, placed this many days ago, status, [(product id, quantity)])
ORDERS: Final = (
    ("ord_1001", "usr_ala", 2, OrderStatus.PLACED, [("salmon-kibble-2kg", 2)]),
    ("ord_1002", "usr_bartek", 1, OrderStatus.PLACED,
     [("chicken-pate-12x85g", 1), ("sisal-scratching-post", 1)]),
    ("ord_1003", "usr_celina", 1, OrderStatus.CANCELLED, [("sisal-scratching-post", 2)]),
    ("ord_1004", "usr_dorota", 0, OrderStatus.PLACED,
     [("salmon-kibble-2kg", 1), ("chicken-pate-12x85g", 2)]),
)  # fmt: skip

PLACED_ORDER_IDS: Final = tuple(order[0] for order in ORDERS if order[3] is OrderStatus.PLACED)


def order_row(
    order_id: str,
    user_id: str,
    lines: list[tuple[str, int]],
    *,
    placed_at: datetime,
    status: OrderStatus = OrderStatus.PLACED,
) -> dict[str, Any]:
    """Return the ``orders`` row of an order of ``lines`` (product id, quantity) at list prices."""
    prices = {product["id"]: product["price_cents"] for product in PRODUCTS}
    items = [
        {"product_id": product_id, "quantity": quantity, "unit_price_cents": prices[product_id]}
        for product_id, quantity in lines
    ]
    return {
        "id": order_id,
        "user_id": user_id,
        "items": items,
        "total_cents": sum(item["quantity"] * item["unit_price_cents"] for item in items),
        "status": status.value,
        "placed_at": placed_at,
        "invoiced_at": None,
        "invoice_batch": None,
    }


async def seed(engine: AsyncEngine) -> bool:
    """Insert the seed data into an empty shop.

    The inserts are ``unfenced()``: no job's lock guards the shop's first rows, and the fenced
    tables refuse a write that says neither.

    Returns:
        ``True`` if it was inserted, ``False`` if the shop already had products (left as is).
    """
    now = datetime.now(UTC)
    async with AsyncSession(engine) as session, unfenced(session):
        if await session.scalar(select(func.count()).select_from(Product)):
            return False
        await session.execute(insert(Product), list(PRODUCTS))
        await session.execute(
            insert(Order),
            [
                order_row(order_id, user, lines, placed_at=now - timedelta(days=ago), status=status)
                for order_id, user, ago, status, lines in ORDERS
            ],
        )
        await session.commit()
    return True
