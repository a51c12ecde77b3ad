"""Arguments several ``leaselock`` commands take."""

from __future__ import annotations

import argparse
import os

from ..stores._common._urls import URL_FORMS

__all__ = ["add_url_argument"]


def add_url_argument(parser: argparse.ArgumentParser) -> None:
    """``--url``, defaulting to ``LEASELOCK_URL``."""
    parser.add_argument(
        "--url",
        default=os.environ.get("LEASELOCK_URL"),
        required="LEASELOCK_URL" not in os.environ,
        help=f"the store: {URL_FORMS} (default: $LEASELOCK_URL)",
    )
