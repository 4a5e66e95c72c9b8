"""A database URL queuebot cannot use is refused before any connection, in one line that
names the variable and what is wrong, and never the password."""

from __future__ import annotations

import pytest

from services.db import check_url
from services.errors import ConfigError


@pytest.mark.parametrize("port", ["notaport", "", "0", "65536", "99999", "54 32"])
def test_a_port_that_is_no_port_is_named(port: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_url(f"postgresql://u:secret-pw@db.internal:{port}/jobs", variable="QUEUEBOT_X_URL")
    assert info.value.message.startswith(
        f"the port {port!r} in QUEUEBOT_X_URL is not a number from 1 to 65535; "
    )
    assert "secret-pw" not in info.value.message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:pw@db.internal:5432/jobs",
        "postgresql://u:p:w@db.internal/jobs",  # a colon in the password is no port
        "postgresql://u:pw@[::1]:65535/jobs",
        "postgresql+psycopg://db.internal/jobs?host=/run/postgresql",
        "sqlite:///./queuebot.db",
        "sqlite:////var/lib/queuebot/queuebot.db",
    ],
)
def test_good_urls_pass(url: str) -> None:
    check_url(url, variable="QUEUEBOT_DATABASE_URL")
