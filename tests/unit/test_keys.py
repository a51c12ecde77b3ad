import pytest

from leaselock import LocksConfigurationError
from leaselock._keys import MAX_KEY_LENGTH, lease_key, validate_key


@pytest.mark.parametrize(
    "key", ["a", "invoices:nightly-export", "Kot \u732b", "x" * MAX_KEY_LENGTH, " spaced "]
)
def test_usable_keys_come_back_unchanged(key):
    assert validate_key(key) is key


def test_a_non_str_key_is_refused_naming_its_type():
    with pytest.raises(LocksConfigurationError, match=r"key=42 is a int; a lock key is a str"):
        validate_key(42)
    with pytest.raises(LocksConfigurationError, match="bytes"):
        validate_key(b"job")


def test_an_empty_key_is_refused_with_an_example():
    with pytest.raises(LocksConfigurationError, match=r"key is empty; name what the lock protects"):
        validate_key("")


def test_a_key_over_500_characters_is_refused_suggesting_a_hash():
    with pytest.raises(LocksConfigurationError, match=r"501 characters long.*at most 500.*hash"):
        validate_key("k" * 501)


def test_a_key_with_a_nul_is_refused():
    with pytest.raises(LocksConfigurationError, match="NUL"):
        validate_key("a\x00b")


def test_a_key_with_a_lone_surrogate_is_refused():
    with pytest.raises(LocksConfigurationError, match="lone surrogate"):
        validate_key("a\udcffb")


def test_the_lease_key_of_a_job_adds_owner():
    assert lease_key("inventory:stock-reconciliation") == "inventory:stock-reconciliation:owner"
