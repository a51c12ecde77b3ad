"""The shop's tables: orders, and the products whose stock the reconciliation writes.

Both are fenced (``fenced_table``): the database itself refuses a write to them from a job run
whose lock a newer run has taken since, and any write outside ``fenced()`` or ``unfenced()``.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Index, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from leaselock.integrations.sqlalchemy import fenced_table, lock_tables


class Base(DeclarativeBase):
    """The shop's declarative base; Alembic migrations create what it describes."""


# leaselock's lock table and sequence on PostgreSQL belong to the shop's schema too: without them
# in the metadata, `alembic revision --autogenerate` proposes to drop them
LEASELOCK_LOCKS = lock_tables(Base.metadata)


class OrderStatus(enum.StrEnum):
    """Where an order stands; only placed orders are invoiced."""

    PLACED = "placed"
    CANCELLED = "cancelled"


class Order(Base):
    """An order a customer placed (or abandoned); invoiced once, in one batch."""

    __tablename__ = "orders"
    # the invoice export's query: placed orders without a batch
    __table_args__ = (Index("orders_to_invoice", "status", "invoice_batch"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(32))
    # one entry per line of the order: product id, quantity and unit price in cents
    items: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    total_cents: Mapped[int]
    status: Mapped[str] = mapped_column(String(16))
    placed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    invoiced_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # the accounting batch the invoice went out in; NULL until the export marks it
    invoice_batch: Mapped[str | None] = mapped_column(String(64))


class Product(Base):
    """A product and its stock, as the last stock reconciliation counted it."""

    __tablename__ = "products"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    price_cents: Mapped[int]
    in_stock: Mapped[int]
    # the fencing token of the reconciliation run that wrote the row, stamped by the database; a
    # run with a lower token (one paused past its lease) may not write over it
    stock_fencing_token: Mapped[int] = mapped_column(BigInteger, server_default="0")


# the invoice export marks orders, the stock reconciliation writes products: a paused run's late
# commit is refused by the database; migration 0007 makes the fences table and the triggers
fenced_table(Order)
fenced_table(Product, token_column="stock_fencing_token")  # noqa: S106 -- a column, no password
