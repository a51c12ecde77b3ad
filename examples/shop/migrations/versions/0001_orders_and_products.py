"""The shop's tables: orders and products.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``orders`` and ``products``."""
    op.create_table(
        "orders",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("items", sa.JSON(), nullable=False),
        sa.Column("total_cents", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("placed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("invoiced_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("invoice_batch", sa.String(64), nullable=True),
    )
    # the export's question: placed orders without an invoice
    op.create_index("orders_to_invoice", "orders", ["status", "invoice_batch"])
    op.create_table(
        "products",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("price_cents", sa.Integer(), nullable=False),
        sa.Column("in_stock", sa.Integer(), nullable=False),
        # 0: no reconciliation has written the row yet; every fencing token is greater
        sa.Column("stock_fencing_token", sa.BigInteger(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    """Drop ``orders`` and ``products``, and everything in them."""
    op.drop_table("products")
    op.drop_index("orders_to_invoice", table_name="orders")
    op.drop_table("orders")
