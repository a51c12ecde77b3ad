"""Fenced writes: a stale holder's write is refused by the resource, in SQL and in memory."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import leaselock
from leaselock import FencingGuard, LocksConfigurationError
from leaselock.integrations.sqlalchemy import fenced_update

metadata = MetaData()
products = Table(
    "products",
    metadata,
    Column("id", String, primary_key=True),
    Column("in_stock", Integer, nullable=False),
    Column("stock_fencing_token", Integer, nullable=False),
)


@pytest.fixture
def engine(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'shop.db'}")
    metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(
            products.insert(), [{"id": "salmon", "in_stock": 12, "stock_fencing_token": 0}]
        )
    yield engine
    engine.dispose()


def write(engine, token: int, count: int) -> int:
    with engine.begin() as connection:
        result = connection.execute(
            fenced_update(
                products,
                products.c.stock_fencing_token,
                token,
                products.c.id == "salmon",
                in_stock=count,
            )
        )
        return result.rowcount


def stock(engine) -> tuple[int, int]:
    with engine.connect() as connection:
        row = connection.execute(select(products.c.in_stock, products.c.stock_fencing_token)).one()
    return row.in_stock, row.stock_fencing_token


def test_a_newer_token_writes_and_an_older_one_is_refused(engine):
    assert write(engine, token=7, count=9) == 1
    assert stock(engine) == (9, 7)
    assert write(engine, token=5, count=12) == 0
    assert stock(engine) == (9, 7)


def test_the_same_token_may_write_again(engine):
    assert write(engine, token=7, count=9) == 1
    assert write(engine, token=7, count=8) == 1
    assert stock(engine) == (8, 7)


class Base(DeclarativeBase):
    pass


class Product(Base):
    __tablename__ = "orm_products"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    in_stock: Mapped[int]
    stock_fencing_token: Mapped[int]


def test_orm_classes_and_mapped_columns_are_fenced_the_same_way(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'orm.db'}")
    Base.metadata.create_all(engine)
    with Session(engine) as session, session.begin():
        session.add(Product(id="salmon", in_stock=12, stock_fencing_token=0))

    def orm_write(token: int, count: int) -> int:
        with Session(engine) as session, session.begin():
            statement = fenced_update(
                Product, Product.stock_fencing_token, token, Product.id == "salmon", in_stock=count
            )
            return session.execute(statement).rowcount  # type: ignore[attr-defined]

    assert orm_write(7, 9) == 1
    assert orm_write(5, 12) == 0
    with Session(engine) as session:
        product = session.get_one(Product, "salmon")
        assert (product.in_stock, product.stock_fencing_token) == (9, 7)
    engine.dispose()


def test_fenced_update_is_also_importable_from_leaselock():
    assert leaselock.fenced_update is fenced_update


def test_the_statement_is_one_conditional_update():
    statement = fenced_update(
        products, products.c.stock_fencing_token, 7, products.c.id == "salmon", in_stock=9
    )
    sql = str(statement.compile(compile_kwargs={"literal_binds": True}))
    assert sql.startswith("UPDATE products SET in_stock=9, stock_fencing_token=7")
    assert "WHERE products.id = 'salmon' AND products.stock_fencing_token <= 7" in sql


@pytest.mark.parametrize("token", [0, -1, "7", 7.0, True, 2**53])
def test_a_bad_token_is_refused_naming_the_fix(token):
    with pytest.raises(
        LocksConfigurationError, match=r"not a fencing token; pass lock.fencing_token"
    ):
        fenced_update(products, products.c.stock_fencing_token, token, in_stock=1)
    with pytest.raises(LocksConfigurationError, match="not a fencing token"):
        FencingGuard().admit("r", token)


def test_setting_the_token_column_by_hand_is_refused():
    with pytest.raises(LocksConfigurationError, match="leave it out of the values"):
        fenced_update(products, products.c.stock_fencing_token, 3, stock_fencing_token=4)


def test_a_guard_admits_growing_tokens_per_resource_and_refuses_older_ones():
    guard = FencingGuard()
    assert guard.admit("salmon", 7)
    assert guard.admit("salmon", 7)
    assert not guard.admit("salmon", 6)
    assert guard.admit("tuna", 3)
    assert guard.highest("salmon") == 7
    assert guard.highest("cod") is None


def test_a_guard_raced_by_threads_keeps_the_highest_token():
    guard = FencingGuard()
    admitted: list[int] = []
    lock = threading.Lock()

    def writer(token: int) -> None:
        if guard.admit("salmon", token):
            with lock:
                admitted.append(token)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(writer, range(1, 2001)))
    assert guard.highest("salmon") == 2000
    assert 2000 in admitted
