"""Testing helpers: a clock you move by hand, faults on demand, the store contract suite.

And a deterministic simulation of your own application's fleet under faults: :func:`simulate`.

``leaselock.testing.pytest`` holds an opt-in pytest base class for the suite; it is not imported
here, so this package needs no pytest.
"""

from ._clock import ManualClock as ManualClock
from ._contract import ContractCase as ContractCase
from ._contract import MakeStore as MakeStore
from ._contract import lock_store_contract as lock_store_contract
from ._faulty import Fault as Fault
from ._faulty import FaultyStore as FaultyStore
from ._faulty import InjectedFaultError as InjectedFaultError
from ._faulty import StoreCall as StoreCall
from ._settle import wait_all_tasks_blocked as wait_all_tasks_blocked
from ._sim_effects import Effect as Effect
from ._sim_effects import SimulatedResource as SimulatedResource
from ._sim_effects import Tick as Tick
from ._sim_faults import Faults as Faults
from ._sim_faults import InjectedFault as InjectedFault
from ._sim_instance import SimulatedInstance as SimulatedInstance
from ._sim_invariants import Invariant as Invariant
from ._sim_invariants import InvariantViolation as InvariantViolation
from ._sim_invariants import SimulationRecord as SimulationRecord
from ._sim_invariants import at_most_once as at_most_once
from ._sim_invariants import leaders_never_overlap as leaders_never_overlap
from ._sim_invariants import no_stale_writes as no_stale_writes
from ._sim_report import SimulationReport as SimulationReport
from ._sim_trace import TraceEvent as TraceEvent
from ._simulate import check_seeds as check_seeds
from ._simulate import simulate as simulate

__all__ = [
    "ContractCase",
    "Effect",
    "Fault",
    "Faults",
    "FaultyStore",
    "InjectedFault",
    "InjectedFaultError",
    "Invariant",
    "InvariantViolation",
    "MakeStore",
    "ManualClock",
    "SimulatedInstance",
    "SimulatedResource",
    "SimulationRecord",
    "SimulationReport",
    "StoreCall",
    "Tick",
    "TraceEvent",
    "at_most_once",
    "check_seeds",
    "leaders_never_overlap",
    "lock_store_contract",
    "no_stale_writes",
    "simulate",
    "wait_all_tasks_blocked",
]
