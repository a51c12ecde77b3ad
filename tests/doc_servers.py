"""The docs' placeholder servers, and the test servers that stand in for them when a block runs.

The docs name servers a reader recognises (``postgresql://app:secret@db:5432/shop``,
``redis://redis.internal:6379/0``, ``http://etcd-1:2379``, an asyncmy pool of ``host="db"``)
and files under ``/var/lib/``. When ``doc_runs.py`` runs a fragment, :class:`RealServers`
rewrites them in its AST, nothing else: a URL becomes the server of a ``conftest.py`` fixture, in
the scheme (and so the driver) the block wrote; a connection's keywords become that server's
host, port, user, password and database; a file goes to the test's temporary directory.

A store page's fragments that read ``url`` or ``secret`` (``doc_context.pyi``) get the page's
server, and ``client`` is a Redis client: :func:`servers_of` names every fixture a block needs.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from doc_blocks import DocBlock

__all__ = ["CLIENT_SERVER", "PAGE_SERVERS", "SERVER_MARKS", "RealServers", "servers_of"]

# The docs' placeholder servers, by (scheme without its driver, host): the fixture that gives a
# real one. A URL with another host is left as written (and fails to connect, at its line).
PLACEHOLDER_SERVERS: Mapping[tuple[str, str], str] = {
    ("postgresql", "db"): "postgres_url",
    ("mysql", "db"): "mysql_url",
    ("redis", "redis.internal"): "redis_url",
    ("redis", "node-1.redis.internal"): "redis_cluster_url",
    ("http", "etcd-1"): "etcd_url",
    ("http", "etcd-2"): "etcd_url",
    ("http", "etcd-3"): "etcd_url",
}
_PLACEHOLDER_HOSTS = frozenset(host for _, host in PLACEHOLDER_SERVERS)
# each store page's server: the one its `url` and `secret` name, and a bare host="db"
PAGE_SERVERS: Mapping[str, str] = {
    "docs/stores/etcd.md": "etcd_url",
    "docs/stores/mysql.md": "mysql_url",
    "docs/stores/postgres.md": "postgres_url",
    "docs/stores/redis.md": "redis_url",
}
# `client` is the application's Redis client
CLIENT_SERVER = "redis_url"
# the pytest marker of each server fixture (pyproject.toml): CI's second round selects by them
SERVER_MARKS: Mapping[str, str] = {
    "etcd_url": "etcd",
    "mysql_url": "mysql",
    "postgres_url": "postgres",
    "redis_cluster_url": "redis_cluster",
    "redis_url": "redis",
}
# the docs' placeholder of an application's data directory
_DATA_DIRECTORY = "/var/lib/"


def servers_of(block: DocBlock) -> frozenset[str]:
    """The server fixtures a fragment runs on: those of its placeholders and of its names."""
    tree = block.tree()
    needed = {
        server
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        for server in [_placeholder_server(node.value)]
        if server is not None
    }
    free = block.free_names()
    page = PAGE_SERVERS.get(block.path)
    if page is not None and ({"url", "secret"} & free or _names_a_placeholder_host(tree)):
        needed.add(page)
    if "client" in free:
        needed.add(CLIENT_SERVER)
    return frozenset(needed)


class RealServers(ast.NodeTransformer):
    """Point a block's placeholder servers and data files at real ones (see the module)."""

    def __init__(self, servers: Mapping[str, str], tmp_path: Path, page: str) -> None:
        """Rewrite for ``servers`` (fixture name to URL) and ``tmp_path``, on the page ``page``."""
        self._servers = servers
        self._tmp_path = tmp_path
        self._page_server = PAGE_SERVERS.get(page)

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        """Replace a placeholder URL, or a file under ``/var/lib/``."""
        if not isinstance(node.value, str):
            return node
        server = _placeholder_server(node.value)
        if server is not None:
            written = urlsplit(node.value)
            real = urlsplit(self._servers[server])
            value = urlunsplit((written.scheme, real.netloc, real.path, real.query, ""))
            return ast.copy_location(ast.Constant(value), node)
        if node.value.startswith(_DATA_DIRECTORY):
            path = self._tmp_path / Path(node.value).name
            return ast.copy_location(ast.Constant(str(path)), node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.Call:
        """Give a connection made of asyncmy's keywords (``host="db", user=...``) a real server."""
        self.generic_visit(node)
        if self._page_server is None or not _has_placeholder_host(node):
            return node
        real = urlsplit(self._servers[self._page_server])
        given = {
            "host": real.hostname,
            "port": real.port,
            "user": real.username,
            "password": real.password or "",
            "db": real.path.lstrip("/"),
        }
        kept = [keyword for keyword in node.keywords if keyword.arg not in given]
        node.keywords = [
            *kept,
            *(ast.keyword(name, ast.Constant(value)) for name, value in given.items()),
        ]
        return node


def _placeholder_server(text: str) -> str | None:
    """The fixture that stands for the server of ``text``, if it is a placeholder URL."""
    if "://" not in text:
        return None
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
    except ValueError:  # not a URL after all
        return None
    return PLACEHOLDER_SERVERS.get((parts.scheme.split("+")[0], host))


def _has_placeholder_host(call: ast.Call) -> bool:
    return any(
        keyword.arg == "host"
        and isinstance(keyword.value, ast.Constant)
        and keyword.value.value in _PLACEHOLDER_HOSTS
        for keyword in call.keywords
    )


def _names_a_placeholder_host(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Call) and _has_placeholder_host(node) for node in ast.walk(tree)
    )
