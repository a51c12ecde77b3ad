"""fenced_update with ORM classes and mapped columns, as with Core tables: mypy must accept both."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, Update
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from leaselock.integrations.sqlalchemy import fenced_update, lock_tables


class Base(DeclarativeBase):
    pass


class Product(Base):
    __tablename__ = "products"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    in_stock: Mapped[int]
    stock_fencing_token: Mapped[int] = mapped_column(BigInteger)


products = Table(
    "core_products",
    MetaData(),
    Column("id", String(64), primary_key=True),
    Column("in_stock", Integer),
    Column("stock_fencing_token", BigInteger),
)


def orm_write(token: int) -> Update:
    return fenced_update(
        Product, Product.stock_fencing_token, token, Product.id == "salmon", in_stock=3
    )


def core_write(token: int) -> Update:
    return fenced_update(
        products, products.c.stock_fencing_token, token, products.c.id == "salmon", in_stock=3
    )


def schema() -> Table:
    return lock_tables(Base.metadata)
