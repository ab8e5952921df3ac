"""Shared fixtures: an isolated environment, and a fresh store on each backend.

PostgreSQL tests use a fresh schema in a database made for this run. They skip only when nothing
answers on 127.0.0.1:5432 — and never in CI (OFFLOAD_REQUIRE_POSTGRES=1), where that is a failure.
"""

from __future__ import annotations

import os
import secrets

import pytest
import sqlalchemy as sa

PG_ADMIN = os.environ.get("OFFLOAD_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "duckdb", "postgresql"]


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """No OFFLOAD_* from the developer's shell, a private home, and a working dir with no .offload/."""
    for key in list(os.environ):
        if key.startswith("OFFLOAD_") and key not in ("OFFLOAD_REQUIRE_POSTGRES", "OFFLOAD_REQUIRE_BROWSER", "OFFLOAD_TEST_PG"):
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local/share"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    yield


def _pg_available() -> bool:
    try:
        engine = sa.create_engine(PG_ADMIN, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        engine.dispose()
        return True
    except Exception:  # noqa: BLE001 - any failure means "not reachable"
        return False


@pytest.fixture(scope="session")
def pg_database():
    """A database made for this test run, dropped at the end."""
    if not _pg_available():
        if os.environ.get("OFFLOAD_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL does not answer on 127.0.0.1:5432, and this run requires it")
        pytest.skip("PostgreSQL does not answer on 127.0.0.1:5432")
    name = f"offload_test_{secrets.token_hex(4)}"
    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.engine.make_url(PG_ADMIN).set(database=name)
    yield url
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


def pg_schema_url(database_url) -> str:
    """A URL whose search_path is a brand-new schema: a fresh, empty store."""
    schema = f"s_{secrets.token_hex(5)}"
    engine = sa.create_engine(database_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    engine.dispose()
    return database_url.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(
        hide_password=False)


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path):
    """A fresh store URL on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    if request.param == "duckdb":
        return f"duckdb:///{tmp_path / 'store.duckdb'}"
    return pg_schema_url(request.getfixturevalue("pg_database"))


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def off(store_url):
    from offload import Offloader

    with Offloader(store_url) as offloader:
        yield offloader


@pytest.fixture
def real_count():
    """Token count with a real tokenizer (o200k_base), the yardstick for every budget."""
    import bpe_openai

    enc = bpe_openai.get_encoding("o200k_base")
    return lambda text: len(enc.encode(text))
