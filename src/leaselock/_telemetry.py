"""OpenTelemetry metrics and spans of one ``Locks``, through ``opentelemetry-api`` only.

``leaselock[otel]`` installs the API; the application's SDK (or none) decides where the data
goes, as with any instrumented library. Without the API, :func:`telemetry_for` returns ``None``
and every call site skips on one ``is None`` check: nothing is imported or recorded.

Metrics (meter ``leaselock``), each with the ``leaselock.instance`` attribute, never the key
(keys can be unbounded: one per order):

- ``leaselock.locks.held`` (up-down counter): leases held now;
- ``leaselock.acquire.duration`` (histogram, s): from an acquire's call to its answer, with
  ``leaselock.acquired`` true or false;
- ``leaselock.renewal.duration`` (histogram, s): a renewal round trip (a batch's);
- ``leaselock.locks.lost`` (counter): real losses, by ``leaselock.detected_by``;
- ``leaselock.job.runs`` (counter) and ``leaselock.job.run.duration`` (histogram, s): by
  ``leaselock.job`` and ``leaselock.outcome``;
- ``leaselock.job.skips`` (counter): by ``leaselock.job`` and ``leaselock.reason``.

Spans (tracer ``leaselock``): ``leaselock.job <job>`` around every job run and
``leaselock.hold <key>`` around every ``hold()`` block, with ``leaselock.key``,
``leaselock.fencing_token`` and ``leaselock.instance``; an error or a lost lock sets the span's
status to ERROR.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Final, final

from ._errors import LocksConfigurationError

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.trace import Span

    EnteredSpan = tuple[Span, Token[Context]]

__all__ = ["Telemetry", "telemetry_for"]

NAME: Final = "leaselock"


def telemetry_for(enabled: bool | None, instance: str) -> Telemetry | None:
    """Return the telemetry of a ``Locks``: on where the API is installed, unless ``False``.

    Raises:
        LocksConfigurationError: ``enabled`` is not a bool or None, or ``True`` without the API.
    """
    if enabled is not None and not isinstance(enabled, bool):
        raise LocksConfigurationError(
            f"opentelemetry={enabled!r}; pass True, False, or None (on where opentelemetry-api "
            "is installed)"
        )
    if enabled is False:
        return None
    if importlib.util.find_spec("opentelemetry") is None:
        if enabled:
            raise LocksConfigurationError(
                "opentelemetry=True needs opentelemetry-api: pip install 'leaselock[otel]'"
            )
        return None
    return Telemetry(instance)


@final
class _Instruments:
    """The process's leaselock instruments: made once, shared by every ``Locks``."""

    __slots__ = ("acquire", "held", "lost", "renewal", "run_duration", "runs", "skips", "tracer")

    def __init__(self) -> None:
        from opentelemetry import metrics, trace  # noqa: PLC0415 -- the extra stays optional

        # proxies until the application sets its providers, then forwarding to them
        meter = metrics.get_meter(NAME)
        self.held = meter.create_up_down_counter(
            "leaselock.locks.held", unit="{lock}", description="Leases held now"
        )
        self.acquire = meter.create_histogram(
            "leaselock.acquire.duration", unit="s", description="From an acquire to its answer"
        )
        self.renewal = meter.create_histogram(
            "leaselock.renewal.duration", unit="s", description="A renewal's round trip"
        )
        self.lost = meter.create_counter(
            "leaselock.locks.lost", unit="{lock}", description="Leases lost, by how it was seen"
        )
        self.runs = meter.create_counter(
            "leaselock.job.runs", unit="{run}", description="Job runs, by outcome"
        )
        self.run_duration = meter.create_histogram(
            "leaselock.job.run.duration", unit="s", description="How long job runs took"
        )
        self.skips = meter.create_counter(
            "leaselock.job.skips", unit="{tick}", description="Job ticks skipped, by reason"
        )
        self.tracer = trace.get_tracer(NAME)


_SHARED: list[_Instruments] = []


def _instruments() -> _Instruments:
    if not _SHARED:
        _SHARED.append(_Instruments())
    return _SHARED[0]


@final
class Telemetry:
    """What one ``Locks`` records: the shared instruments, with its instance label."""

    __slots__ = ("_acquired", "_attributes", "_instance", "_made", "_not_acquired")

    def __init__(self, instance: str) -> None:
        """Record as ``instance``."""
        self._made = _instruments()
        self._instance = instance
        self._attributes = {"leaselock.instance": instance}
        # made once: every acquire records one of the two
        self._acquired: dict[str, str | bool] = {**self._attributes, "leaselock.acquired": True}
        self._not_acquired: dict[str, str | bool] = {
            **self._attributes,
            "leaselock.acquired": False,
        }

    # --- locks ------------------------------------------------------------------------------

    def acquire_answered(self, seconds: float, *, acquired: bool) -> None:
        """An acquire (with its wait) ended after ``seconds``."""
        self._made.acquire.record(seconds, self._acquired if acquired else self._not_acquired)

    def held_changed(self, by: int) -> None:
        """``by`` leases more (or fewer) are held."""
        self._made.held.add(by, self._attributes)

    def renewed(self, seconds: float) -> None:
        """A renewal round trip took ``seconds``."""
        self._made.renewal.record(seconds, self._attributes)

    def lost(self, detected_by: str) -> None:
        """A lease was lost (not handed back)."""
        self._made.lost.add(1, {**self._attributes, "leaselock.detected_by": detected_by})

    # --- jobs -------------------------------------------------------------------------------

    def job_ran(self, job: str, outcome: str, seconds: float) -> None:
        """A run of ``job`` ended with ``outcome`` after ``seconds``."""
        attributes = {**self._attributes, "leaselock.job": job, "leaselock.outcome": outcome}
        self._made.runs.add(1, attributes)
        self._made.run_duration.record(seconds, attributes)

    def job_skipped(self, job: str, reason: str) -> None:
        """A tick of ``job`` was skipped for ``reason``."""
        self._made.skips.add(
            1, {**self._attributes, "leaselock.job": job, "leaselock.reason": reason}
        )

    # --- spans ------------------------------------------------------------------------------

    def start_span(self, name: str, key: str, fencing_token: int) -> Span:
        """Start a span for a job run or a hold; end it with :meth:`end_span`."""
        return self._made.tracer.start_span(
            name,
            attributes={
                "leaselock.key": key,
                "leaselock.fencing_token": fencing_token,
                "leaselock.instance": self._instance,
            },
        )

    def end_span(self, span: Span, error: str | None, *, lost: bool) -> None:
        """End ``span``; an error (``"Type: message"``), or a lock lost meanwhile, fails it."""
        from opentelemetry.trace import Status, StatusCode  # noqa: PLC0415 -- optional extra

        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        elif lost:
            span.set_status(Status(StatusCode.ERROR, "the lock was lost during the span"))
        span.end()

    def enter_span(self, name: str, key: str, fencing_token: int) -> EnteredSpan:
        """Start a span and make it the current one, so spans started inside nest under it.

        Returns:
            The span and the context token that :meth:`exit_span` takes back.
        """
        from opentelemetry import context, trace  # noqa: PLC0415 -- optional extra

        span = self.start_span(name, key, fencing_token)
        return span, context.attach(trace.set_span_in_context(span))

    def exit_span(self, entered: EnteredSpan, error: str | None, *, lost: bool) -> None:
        """End a span from :meth:`enter_span` and restore the context before it."""
        from opentelemetry import context  # noqa: PLC0415 -- optional extra

        span, token = entered
        context.detach(token)
        self.end_span(span, error, lost=lost)
