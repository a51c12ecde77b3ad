"""``python -m leaselock``: the ``leaselock`` command."""

from ._cli import main

raise SystemExit(main())
