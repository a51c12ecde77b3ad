"""Testing helpers: a clock you move by hand, and the store contract suite.

``leaselock.testing.pytest`` holds an opt-in pytest base class for the suite; it is not imported
here, so this package needs no pytest.
"""

from ._clock import ManualClock as ManualClock
from ._contract import ContractCase as ContractCase
from ._contract import MakeStore as MakeStore
from ._contract import lock_store_contract as lock_store_contract

__all__ = ["ContractCase", "MakeStore", "ManualClock", "lock_store_contract"]
