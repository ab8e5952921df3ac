"""Schemathesis against the OpenAPI schema: generated requests never make the server fail (no 5xx)."""

from __future__ import annotations

import json

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from offload import Offloader  # noqa: E402
from offload.api import ApiConfig, create_app  # noqa: E402


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):
    folder = tmp_path_factory.mktemp("schema-store")
    off = Offloader(f"sqlite:///{folder / 'store.db'}")
    off.put(json.dumps([{"id": i, "status": "ok" if i % 3 else "error"} for i in range(3000)]), tool="api")
    off.put("".join(f"line {i}\n" for i in range(20_000)), tool="bash")
    app = create_app(off, ApiConfig(loopback=False))  # the ASGI test client names its host "testserver"
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    off.close()


def test_no_server_errors(api_schema):
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 12
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
        def check(case):
            response = case.call()
            assert response.status_code < 500, (case.method, case.formatted_path, response.text[:500])
            if response.status_code >= 400:  # every error leaves in one JSON shape
                body = response.json()
                assert set(body) >= {"error", "message", "status"} and body["status"] == response.status_code

        check()
