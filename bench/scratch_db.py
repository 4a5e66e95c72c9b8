"""A scratch PostgreSQL database for one benchmark run, made and dropped by name."""

from __future__ import annotations

import psycopg
from sqlalchemy.engine import make_url


def _admin(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def recreate(url: str, name: str) -> str:
    """Drop and create database ``name`` beside ``url``; return its async URL."""
    with psycopg.connect(_admin(url), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return (
        make_url(url)
        .set(drivername="postgresql+psycopg", database=name)
        .render_as_string(hide_password=False)
    )


def drop(url: str, name: str) -> None:
    with psycopg.connect(_admin(url), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
