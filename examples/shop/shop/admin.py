"""The admin endpoint: export the invoices now, by hand, under the same lock as the nightly run."""

from __future__ import annotations

import hmac
from typing import Annotated, Final

from fastapi import APIRouter, Depends, Header, HTTPException, Request, status

from leaselock import LockNotAcquiredError

from .jobs import INVOICE_EXPORT_KEY, ExportResult
from .state import shop_of

# a manual export waits this long for a run in progress (scheduled or manual) to finish
EXPORT_WAIT: Final = "2s"

router = APIRouter()


def require_admin_token(
    request: Request, x_admin_token: Annotated[str | None, Header()] = None
) -> None:
    """Refuse the request unless its ``x-admin-token`` header is the shop's ``ADMIN_TOKEN``.

    Raises:
        HTTPException: 403 when the header is missing or wrong.
    """
    expected = shop_of(request.app).settings.admin_token.get_secret_value()
    # constant time: how long the comparison takes must not tell how much of a guess was right
    if x_admin_token is None or not hmac.compare_digest(x_admin_token.encode(), expected.encode()):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            detail="Send the shop's ADMIN_TOKEN in the x-admin-token header",
        )


@router.post("/admin/invoice-exports", dependencies=[Depends(require_admin_token)])
async def export_invoices(request: Request) -> ExportResult:
    """Export every placed order without an invoice now.

    Takes the lock of the nightly export, so a manual export and a scheduled one never run at
    once, on any instance: it waits up to 2 s for one in progress, then answers 409.
    """
    shop = shop_of(request.app)
    try:
        return await shop.locks.with_lock(
            INVOICE_EXPORT_KEY, shop.invoice_export.export, wait=EXPORT_WAIT
        )
    except LockNotAcquiredError as error:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            detail=(
                f"An invoice export is already running (lock {error.key!r} stayed held for "
                f"{error.waited_ms / 1000:g} s); its orders are being exported, try again once "
                "it has finished"
            ),
        ) from error
