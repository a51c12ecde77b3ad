"""OpenTelemetry: metrics and spans of locks and jobs, read back with the SDK's in-memory reader
and exporter; nothing at all without the API, or when turned off."""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import leaselock
from leaselock import Locks, LocksConfigurationError
from leaselock.stores import InMemoryLockStore
from leaselock.testing import FaultyStore, ManualClock, wait_all_tasks_blocked


@dataclass
class Collected:
    reader: InMemoryMetricReader
    spans: InMemorySpanExporter

    def points(self, name: str, instance: str) -> list[Any]:
        """The data points of metric ``name`` recorded by ``instance``."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data is not None else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != name:
                        continue
                    found += [
                        point
                        for point in metric.data.data_points
                        if point.attributes.get("leaselock.instance") == instance
                    ]
        return found

    def value(self, name: str, instance: str, **attributes: object) -> float:
        """The summed value (or histogram sum) of ``name`` for points with ``attributes``."""
        total = 0.0
        for point in self.points(name, instance):
            wanted = {f"leaselock.{key}": value for key, value in attributes.items()}
            if all(point.attributes.get(key) == value for key, value in wanted.items()):
                total += getattr(point, "value", None) or getattr(point, "sum", 0.0)
        return total

    def finished(self, instance: str) -> list[ReadableSpan]:
        return [
            span
            for span in self.spans.get_finished_spans()
            if (span.attributes or {}).get("leaselock.instance") == instance
        ]


@pytest.fixture(scope="session")
def collected() -> Collected:
    """The process's providers, set once: OpenTelemetry allows one global provider each."""
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(tracer_provider)
    return Collected(reader, spans)


@pytest.fixture
def instance() -> str:
    """A label of this test's own: every point it reads carries it."""
    return f"otel-{uuid.uuid4().hex[:8]}"


async def test_a_job_run_is_counted_timed_and_a_span(
    collected: Collected, instance: str, clock: ManualClock
):
    job = f"warehouse:count:{instance}"
    hold_open = asyncio.Event()

    @leaselock.without_overlapping(key=job)
    async def count() -> str:
        await hold_open.wait()
        return "counted"

    async with Locks(store=InMemoryLockStore(clock=clock), clock=clock, instance=instance) as locks:
        locks.register(count)
        running = asyncio.create_task(count())
        await wait_all_tasks_blocked()
        assert await count() is None
        await clock.advance("2500ms")
        hold_open.set()
        assert await running == "counted"

    assert collected.value("leaselock.job.runs", instance, job=job, outcome="ok") == 1
    assert collected.value("leaselock.job.run.duration", instance, job=job) == 2.5
    assert collected.value("leaselock.job.skips", instance, job=job, reason="in-progress") == 1
    [span] = collected.finished(instance)
    assert span.name == f"leaselock.job {job}"
    assert span.attributes is not None
    assert (span.attributes["leaselock.key"], span.attributes["leaselock.fencing_token"]) == (
        job,
        1,
    )
    assert span.status.status_code is StatusCode.UNSET


async def test_a_failed_run_fails_its_span_and_is_counted_by_outcome(
    collected: Collected, instance: str, clock: ManualClock
):
    job = f"invoices:export:{instance}"

    @leaselock.on_one_instance(key=job)
    async def export() -> None:
        raise ConnectionError("accounting is down")

    async with Locks(store=InMemoryLockStore(clock=clock), clock=clock, instance=instance) as locks:
        locks.register(export)
        with pytest.raises(ConnectionError):
            await export()

    assert collected.value("leaselock.job.runs", instance, job=job, outcome="error") == 1
    [span] = collected.finished(instance)
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ConnectionError: accounting is down"


async def test_locks_held_acquire_time_renewals_and_losses_are_measured(
    collected: Collected, instance: str, clock: ManualClock
):
    store = FaultyStore(InMemoryLockStore(clock=clock), clock=clock)
    async with Locks(store=store, clock=clock, instance=instance, ttl="30s") as locks:
        first = await locks.acquire("orders:1")
        second = await locks.acquire("orders:2")
        assert first is not None
        assert second is not None
        assert collected.value("leaselock.locks.held", instance) == 2
        assert await locks.acquire("orders:1") is None
        await clock.advance("10s")
        await wait_all_tasks_blocked()
        store.refuse_renewals(key="orders:2")
        await clock.advance("10s")
        await wait_all_tasks_blocked()
        assert not second.held
        await first.release()
        assert collected.value("leaselock.locks.held", instance) == 0

    points = collected.points("leaselock.acquire.duration", instance)
    assert sorted((p.attributes["leaselock.acquired"], p.count) for p in points) == [
        (False, 1),
        (True, 2),
    ]
    renewals = collected.points("leaselock.renewal.duration", instance)
    assert sum(point.count for point in renewals) == 2
    assert collected.value("leaselock.locks.lost", instance, detected_by="renewal") == 1


async def test_a_hold_is_a_span_and_the_current_one_inside_its_block(
    collected: Collected, instance: str, clock: ManualClock
):
    tracer = trace.get_tracer("the-application")
    async with Locks(store=InMemoryLockStore(clock=clock), clock=clock, instance=instance) as locks:
        async with locks.hold("reports:monthly") as lock:
            with tracer.start_as_current_span(
                "render", attributes={"leaselock.instance": instance}
            ):
                pass
        with pytest.raises(ValueError, match="bad month"):
            async with locks.hold("reports:monthly"):
                raise ValueError("bad month")

    inner, held, failed = collected.finished(instance)
    assert [s.name for s in (inner, held, failed)] == [
        "render",
        "leaselock.hold",
        "leaselock.hold",
    ]
    assert inner.parent is not None
    assert held.context is not None
    assert inner.parent.span_id == held.context.span_id
    assert held.attributes is not None
    assert held.attributes["leaselock.fencing_token"] == lock.fencing_token
    assert held.attributes["leaselock.key"] == "reports:monthly"
    assert held.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "ValueError: bad month"


async def test_turned_off_nothing_is_recorded(collected: Collected, instance: str):
    async with Locks(instance=instance, opentelemetry=False) as locks, locks.hold("orders:1"):
        pass
    assert collected.points("leaselock.acquire.duration", instance) == []
    assert collected.finished(instance) == []


def test_without_the_api_nothing_is_made_and_asking_for_it_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "opentelemetry" else real_find_spec(name, *rest),
    )
    Locks(opentelemetry=None)
    with pytest.raises(LocksConfigurationError, match=r"pip install 'leaselock\[otel\]'"):
        Locks(opentelemetry=True)
    with pytest.raises(LocksConfigurationError, match="opentelemetry='yes'"):
        Locks(opentelemetry="yes")  # type: ignore[arg-type]
