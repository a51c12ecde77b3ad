import pytest

from leaselock._redact import redact_secrets


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://user:p@ss@host/db", "postgresql://user:***@host/db"),
        (
            "postgresql://u:a@b@c@db.internal:5432/shop?sslmode=require",
            "postgresql://u:***@db.internal:5432/shop?sslmode=require",
        ),
        ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
        (
            "rediss://default:pw@cache/0 and postgresql://a:b@h/d",
            "rediss://default:***@cache/0 and postgresql://a:***@h/d",
        ),
        ("host=db password='p@ss word' user=app", "host=db password=*** user=app"),
    ],
)
def test_passwords_are_hidden_up_to_the_last_at_sign_of_the_authority(text: str, shown: str):
    assert redact_secrets(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://db.internal:5432/shop",
        "redis://cache:6379/0?client_name=a@b",
        "mysql://reader@db/shop",
        "sqlite:///var/lib/app/locks.db",
    ],
)
def test_urls_without_a_password_are_left_alone(text: str):
    assert redact_secrets(text) == text
