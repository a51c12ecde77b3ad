"""Testing helpers: a clock you move by hand, faults on demand, and the store contract suite.

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

__all__ = [
    "ContractCase",
    "Fault",
    "FaultyStore",
    "InjectedFaultError",
    "MakeStore",
    "ManualClock",
    "StoreCall",
    "lock_store_contract",
    "wait_all_tasks_blocked",
]
