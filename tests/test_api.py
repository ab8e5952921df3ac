"""The HTTP API in-process (httpx over ASGI): paths and shapes, errors, auth, Host/Origin guards, headers."""

from __future__ import annotations

import json
import uuid

import pytest
from fastapi.testclient import TestClient

from offload import Offloader
from offload.api import ApiConfig, create_app

LOCAL = "http://127.0.0.1:8765"


@pytest.fixture
def server(store_url):
    off = Offloader(store_url)
    with TestClient(create_app(off), base_url=LOCAL) as client:
        yield off, client
    off.close()


def _log(n: int = 40_000) -> bytes:
    return "".join(f"{i:05d} GET /api/items/{i} 200 {i % 50} ms\n" for i in range(n)).encode() + b"PANIC: out of memory\n"


def test_store_list_show_and_read_back(server):
    off, client = server
    body = _log()
    made = client.post("/api/artifacts", params={"tool": "bash", "session": "s1"}, content=body)
    assert made.status_code == 201
    ref = made.json()
    assert ref["bytes"] == len(body) and ref["lines"] == body.count(b"\n") and "PANIC" in ref["text"]
    aid = ref["artifact_id"]
    listing = client.get("/api/artifacts", params={"session": "s1"}).json()
    assert [a["id"] for a in listing["items"]] == [aid] and listing["next_cursor"] is None
    meta = client.get(f"/api/artifacts/{aid}").json()
    assert meta["tool"] == "bash" and meta["bytes"] == len(body)
    seen = client.get(f"/api/artifacts/{aid}/reference").json()
    assert seen["text"] == ref["text"]  # exactly what the model saw
    raw = client.get(f"/api/artifacts/{aid}/raw")
    assert raw.content == body and raw.headers["content-length"] == str(len(body))
    page = client.get(f"/api/artifacts/{aid}/slice", params={"offset": -1}).json()
    assert page["content"] == "PANIC: out of memory" and page["next"] is None
    hits = client.post(f"/api/artifacts/{aid}/query", json={"grep": "PANIC"}).json()
    last_line = body.count(b"\n") - 1
    assert hits["result"] == [f"{last_line}: PANIC: out of memory"]
    logged = client.get("/api/extracts", params={"artifact_id": aid}).json()["items"]
    assert [e["op"] for e in logged] == ["slice", "grep"]
    grep_at = logged[1]["created_at"]  # since is inclusive, until exclusive, as for artifacts
    assert [e["op"] for e in client.get("/api/extracts", params={"until": grep_at}).json()["items"]] == ["slice"]
    assert [e["op"] for e in client.get("/api/extracts", params={"since": grep_at}).json()["items"]] == ["grep"]


def test_the_extract_log_pages_with_a_cursor_through_equal_times(server, monkeypatch):
    """Pages of the extract log, oldest first, joined, are the whole log once each, also where several
    extracts share one time (a `since` of the last time seen would repeat or skip them)."""
    import offload.store.extract_log as log_module
    import offload.store.store as store_module

    off, client = server
    aid = client.post("/api/artifacts", params={"tool": "bash"}, content=_log(2_000)).json()["artifact_id"]
    client.get(f"/api/artifacts/{aid}/slice", params={"offset": 0})
    at = store_module.utcnow().replace(microsecond=123456)  # now: the artifact must not look expired
    monkeypatch.setattr(store_module, "utcnow", lambda: at)
    monkeypatch.setattr(log_module, "utcnow", lambda: at)  # the time an extract is logged at
    for offset in range(1, 6):
        client.get(f"/api/artifacts/{aid}/slice", params={"offset": offset})
    monkeypatch.undo()
    whole = client.get("/api/extracts").json()
    assert len(whole["items"]) == 6 and whole["next_cursor"] is None
    seen, cursor, pages = [], None, 0
    while True:
        page = client.get("/api/extracts", params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        seen += page["items"]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and [e["id"] for e in seen] == [e["id"] for e in whole["items"]]
    assert sum(e["created_at"] == at.isoformat() + "Z" for e in seen) == 5
    bad = client.get("/api/extracts", params={"cursor": "not-a-cursor"})
    assert bad.status_code == 422 and "next_cursor" in bad.json()["message"]  # as /api/artifacts answers it


def test_raw_serves_a_byte_range_and_head(server):
    """A client resumes or samples a big artifact with a Range request, and sizes it with HEAD."""
    off, client = server
    body = _log(300_000)  # several chunks: a range may span two
    aid = client.post("/api/artifacts", params={"tool": "bash"}, content=body).json()["artifact_id"]
    url = f"/api/artifacts/{aid}/raw"
    for spec, (start, end) in {"bytes=0-99": (0, 100), "bytes=1048570-1048700": (1048570, 1048701),
                               f"bytes={len(body) - 10}-": (len(body) - 10, len(body)),
                               "bytes=-21": (len(body) - 21, len(body))}.items():
        part = client.get(url, headers={"Range": spec})
        assert part.status_code == 206 and part.content == body[start:end], spec
        assert part.headers["content-range"] == f"bytes {start}-{end - 1}/{len(body)}"
        assert part.headers["content-length"] == str(end - start)
    assert client.get(url, headers={"Range": "bytes=0-1,5-6"}).content == body  # several ranges: the whole
    for invalid in ("bytes=5-3", "bytes=+5-9", "bytes=1_0-20", "bytes=-", "items=0-9"):  # ignored (RFC 9110)
        whole = client.get(url, headers={"Range": invalid})
        assert (whole.status_code, whole.content) == (200, body), invalid
    beyond = client.get(url, headers={"Range": f"bytes={len(body)}-"})
    assert beyond.status_code == 416 and beyond.headers["content-range"] == f"bytes */{len(body)}"
    head = client.head(url)
    assert head.status_code == 200 and head.headers["content-length"] == str(len(body)) and not head.content
    assert head.headers["accept-ranges"] == "bytes"


def test_values_json_cannot_round_trip_by_default_come_back_exactly(server):
    """A lone surrogate (a JavaScript string cut inside an emoji) and integers beyond 64 bits: the default
    JSON response could not encode the first (the request failed) and the store keeps both exactly."""
    off, client = server
    ref = off.process("api", {"items": [{"memo": "cut \ud83d", "wei": 10**21 + i} for i in range(2000)]})
    answer = client.post(f"/api/artifacts/{ref.artifact_id}/query", json={"jmespath": "items[7]"})
    assert answer.status_code == 200
    assert answer.json()["result"] == {"memo": "cut \ud83d", "wei": 10**21 + 7}


def test_list_filters_and_cursor(server):
    off, client = server
    ids = [client.post("/api/artifacts", params={"tool": "grep" if i % 2 else "read"},
                       content=f"result {i}\n".encode()).json()["artifact_id"] for i in range(5)]
    assert {a["id"] for a in client.get("/api/artifacts", params={"tool": "grep"}).json()["items"]} == set(ids[1::2])
    seen, cursor = [], None
    while True:
        page = client.get("/api/artifacts", params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        seen += [a["id"] for a in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(seen) == sorted(ids)
    assert client.get("/api/artifacts", params={"since": "2999-01-01"}).json()["items"] == []
    assert client.get("/api/artifacts", params={"text": ids[3]}).json()["items"][0]["id"] == ids[3]


def test_errors_have_one_shape_and_the_right_status(server):
    off, client = server
    aid = client.post("/api/artifacts", params={"tool": "api"},
                      content=json.dumps([{"a": i} for i in range(5000)]).encode()).json()["artifact_id"]
    cases = [
        (client.get("/api/artifacts/art_nope00000000"), 404, "not_found"),
        (client.post(f"/api/artifacts/{aid}/query", json={"jmespath": "[?a=="}), 422, "invalid_query"),
        (client.post(f"/api/artifacts/{aid}/query", json={"sql": "COPY artifact TO '/tmp/x'"}), 422, "invalid_query"),
        (client.get(f"/api/artifacts/{aid}/slice", params={"unit": "pages"}), 422, "invalid_argument"),
        (client.get(f"/api/artifacts/{aid}/slice", params={"limit": -1}), 422, "invalid_argument"),
        (client.post("/api/artifacts", content=b"x"), 422, "invalid_argument"),  # no tool
        (client.get("/api/artifacts", params={"cursor": "garbage"}), 422, "invalid_argument"),
        (client.post("/api/extracts/ext_nope/rerun"), 404, "not_found"),
        # a model may send any integer: past 64 bits it is bad input, not a server error
        (client.get(f"/api/artifacts/{aid}/slice", params={"offset": 10**30}), 422, "invalid_argument"),
        (client.post(f"/api/artifacts/{aid}/query", json={"grep": "a", "offset": 10**30}), 422, "invalid_argument"),
        # found by a black-box review: each of these was a 500
        (client.post(f"/api/artifacts/{aid}/query", json={"jmespath": "(" * 5000 + "@" + ")" * 5000}), 422,
         "invalid_query"),
        (client.post(f"/api/artifacts/{aid}/query", json={"grep": "(" * 10000 + "a" + ")" * 10000}), 422,
         "invalid_query"),
        (client.post(f"/api/artifacts/{aid}/query", content=b'{"sql": "SELECT \'\\ud800\'"}',
                     headers={"content-type": "application/json"}), 422, "invalid_argument"),
        (client.post(f"/api/artifacts/{aid}/query", json={"sql": {"a": 1}}), 422, "invalid_argument"),
        (client.post(f"/api/artifacts/{aid}/query", json={"jmespath": 5}), 422, "invalid_argument"),
        (client.post(f"/api/artifacts/{aid}/query", json={"grep": ["a"]}), 422, "invalid_argument"),
        (client.get("/api/artifacts", params={"since": "0001-01-01T00:00:00+01:00"}), 422, "invalid_argument"),
        (client.get("/api/artifacts", params={"until": "9999-12-31T23:59:59-01:00"}), 422, "invalid_argument"),
        # a lone surrogate the message quotes back, and malformed Host and Origin headers: each was a 500
        (client.post(f"/api/artifacts/{aid}/query", content=b'{"jmespath": "\\ud800"}',
                     headers={"content-type": "application/json"}), 422, "invalid_query"),
        (client.post(f"/api/artifacts/{aid}/query", content=b'{"grep": "[\\ud800"}',
                     headers={"content-type": "application/json"}), 422, "invalid_query"),
        (client.get("/api/stats", headers={"host": "[::1"}), 400, "bad_request"),
        (client.get("/api/stats", headers={"origin": "http://[::1"}), 403, "forbidden"),
        (client.get("/api/stats", headers={"origin": "http://[x]"}), 403, "forbidden"),
        # found by a second black-box review: a misspelt field ignored, an unknown id's empty log, any kind
        (client.post(f"/api/artifacts/{aid}/query", json={"jmespath": "[*].a", "offest": 5}), 422,
         "invalid_argument"),
        (client.get("/api/extracts", params={"artifact_id": "art_nope00000000"}), 404, "not_found"),
        (client.get("/api/artifacts", params={"kind": "nonsense"}), 422, "invalid_argument"),
        (client.request("TRACE", "/api/stats"), 405, "method_not_allowed"),
    ]
    for response, status, code in cases:
        body = response.json()
        assert (response.status_code, body["error"], body["status"]) == (status, code, status), body
        assert body["message"]
    assert "Unknown token \ud800" in cases[-9][0].json()["message"]  # quoted exactly (a JSON escape)
    assert "offest" in cases[-4][0].json()["message"]
    # a JSON object sent as text: "Input should be a valid dictionary", with no word of the content type
    plain = client.post(f"/api/artifacts/{aid}/query", content=b'{"jmespath": "[0]"}', headers={"content-type": "text/plain"})
    assert plain.status_code == 422 and "send Content-Type: application/json" in plain.json()["message"]
    assert "Content-Type" not in cases[-4][0].json()["message"]  # a JSON body's own mistake says only that
    # a body that is not UTF-8, or not JSON: "There was an error parsing the body", "body.9: JSON decode error"
    for content, status, says in ((b'{"grep": "caf\xe9"}', 400, "it must be JSON text in UTF-8"),
                                  (b'{"grep": ', 422, "The body is not valid JSON (at character 9).")):
        bad = client.post(f"/api/artifacts/{aid}/query", content=content, headers={"content-type": "application/json"})
        assert bad.status_code == status and says in bad.json()["message"], bad.json()
    wrong_path = client.get(f"/api/artifacts/{aid}/slice", params={"unit": "items", "path": "nope"})
    assert wrong_path.status_code == 422 and "(it is null (nothing is there))" in wrong_path.json()["message"]
    assert cases[-1][0].headers["allow"] == "GET"  # RFC 9110: a 405 names the methods there are
    # a limit below 1 is told what it must be, once: not ">= 0", then "at least 1" for 0
    for limit, says in ((-1, "must not be negative"), (0, "at least 1")):
        for response in (client.get(f"/api/artifacts/{aid}/slice", params={"limit": limit}),
                         client.post(f"/api/artifacts/{aid}/query", json={"jmespath": "[*].a", "limit": limit})):
            assert response.status_code == 422 and says in response.json()["message"], response.json()
    assert client.delete(f"/api/artifacts/{aid}").status_code == 204
    gone = client.get(f"/api/artifacts/{aid}/slice")
    assert gone.status_code == 410 and gone.json()["error"] == "deleted"  # an expired one says "expired"


def test_upload_too_large_is_413_and_stores_nothing(store_url):
    off = Offloader(store_url)
    with TestClient(create_app(off, ApiConfig(max_upload_bytes=1000)), base_url=LOCAL) as client:
        response = client.post("/api/artifacts", params={"tool": "x"}, content=b"y" * 5000)
        assert response.status_code == 413 and response.json()["error"] == "too_large"
        assert client.get("/api/artifacts").json()["items"] == []
    off.close()


def test_pin_unpin_stats_and_rerun(server):
    off, client = server
    aid = client.post("/api/artifacts", params={"tool": "grep", "session": "s9"}, content=_log()).json()["artifact_id"]
    assert client.put(f"/api/artifacts/{aid}/pin").json()["pinned"] is True
    assert client.delete(f"/api/artifacts/{aid}/pin").json()["pinned"] is False
    client.get(f"/api/artifacts/{aid}/slice", params={"offset": 5, "limit": 3})
    (extract,) = client.get("/api/extracts").json()["items"]
    rerun = client.post(f"/api/extracts/{extract['id']}/rerun").json()
    assert rerun["results"][0]["status"] == "unchanged"
    stats = client.get("/api/stats").json()
    meta = off.get(aid)
    assert stats["artifacts"] == 1 and stats["tokens_saved"] == meta["tokens"] - meta["shown_tokens"] > 0
    assert stats["by_session"][0]["name"] == "s9" and stats["by_tool"][0]["name"] == "grep"


def test_security_headers_and_dns_rebinding_guard(server):
    off, client = server
    response = client.get("/api/artifacts")
    for header in ("x-content-type-options", "x-frame-options", "content-security-policy", "referrer-policy"):
        assert header in response.headers
    assert client.get("/api/artifacts", headers={"host": "attacker.example:8765"}).status_code == 403
    assert client.get("/api/artifacts", headers={"origin": "http://attacker.example"}).status_code == 403
    assert client.get("/api/artifacts", headers={"origin": "http://localhost:8765"}).status_code == 200
    assert client.get("/api/artifacts", headers={"host": "localhost:8765"}).status_code == 200
    # a sandboxed frame of any site sends Origin: null; it may not store, delete or rerun
    null = {"origin": "null", "content-type": "text/plain"}
    assert client.post("/api/artifacts", params={"tool": "x"}, content=b"from a frame\n", headers=null).status_code == 403
    assert client.get("/api/artifacts", headers=null).json()["items"] == []


def test_the_login_page_gets_its_style_without_a_token(store_url):
    off = Offloader(store_url)
    config = ApiConfig(tokens={"admin-token": None}, loopback=False)
    with TestClient(create_app(off, config), base_url="http://offload.internal") as client:
        assert client.get("/login").status_code == 200
        style = client.get("/static/style.css")
        assert style.status_code == 200 and "text/css" in style.headers["content-type"]
        refused = client.get("/api/artifacts")
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
        assert "/login" in refused.json()["message"]
        # a browser opening a page is sent to the login page, not shown the JSON of the 401
        page = client.get("/", headers={"accept": "text/html"}, follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"] == "/login"
        assert client.get("/api/stats", headers={"accept": "text/html"}).status_code == 401  # the API: never
    off.close()


def test_a_lone_surrogate_in_a_session_stores_nothing_half(server):
    """A query whose session holds a lone surrogate stored its derived result, then failed on the extract
    log with a 500 saying nothing was changed."""
    off, client = server
    body = "".join(f"line number {i}\n" for i in range(20_000)).encode()
    aid = client.post("/api/artifacts", params={"tool": "x"}, content=body).json()["artifact_id"]
    response = client.post(f"/api/artifacts/{aid}/query", content=b'{"grep": "line number 1", "session": "\\ud800"}',
                           headers={"content-type": "application/json"})
    assert response.status_code == 200 and response.json()["count"] == 11_111
    (extract,) = client.get("/api/extracts").json()["items"]
    assert extract["session"] == "\\ud800" and extract["result_artifact_id"] == response.json()["artifact_id"]


def test_the_page_of_an_artifact_holding_lone_surrogates_renders(server):
    off, client = server
    data = b"[" + b",".join(b'{"id": %d, "s": "a\\ud800b", "\\udc00k": 0}' % i for i in range(300)) + b"]"
    aid = client.post("/api/artifacts", params={"tool": "sur"}, content=data).json()["artifact_id"]
    for params in ({}, {"unit": "lines"}, {"unit": "items"}):
        page = client.get(f"/artifacts/{aid}", params=params)
        assert page.status_code == 200 and "text/html" in page.headers["content-type"], page.text[:300]
        assert "a\\ud800b" in page.text


def test_tokens_and_namespace_scopes(store_url):
    off = Offloader(store_url)
    config = ApiConfig(tokens={"admin-token": None, "team-a-token": "team-a"}, loopback=False)
    with TestClient(create_app(off, config), base_url="http://offload.internal") as client:
        assert client.get("/api/artifacts").status_code == 401
        assert client.get("/api/artifacts", headers={"authorization": "Bearer wrong"}).status_code == 401
        team = {"authorization": "Bearer team-a-token"}
        admin = {"authorization": "Bearer admin-token"}
        mine = client.post("/api/artifacts", params={"tool": "t"}, content=b"team a data\n", headers=team).json()
        other = client.post("/api/artifacts", params={"tool": "t"}, content=b"default data\n", headers=admin).json()
        assert [a["id"] for a in client.get("/api/artifacts", headers=team).json()["items"]] == [mine["artifact_id"]]
        assert client.get(f"/api/artifacts/{other['artifact_id']}", headers=team).status_code == 404
        assert client.get("/api/artifacts", headers={**team, "x-offload-namespace": "team-b"}).status_code == 403
        assert client.get(f"/api/artifacts/{mine['artifact_id']}", headers={**admin, "x-offload-namespace": "team-a"}
                          ).status_code == 200
        assert client.get("/api/stats", headers=team).json()["artifacts"] == 1
    off.close()


def test_the_openapi_schema_declares_the_upload_body_and_raw_responses(server):
    """POST /api/artifacts declared no body (generated clients could not send content), and /raw only a
    JSON 200 (it answers the stored type, 206 and 416, and reads Range)."""
    off, client = server
    paths = client.get("/openapi.json").json()["paths"]
    body = paths["/api/artifacts"]["post"]["requestBody"]
    assert body["required"] and body["content"]["*/*"]["schema"]["format"] == "binary"
    raw = paths["/api/artifacts/{artifact_id}/raw"]["get"]
    assert {"200", "206", "416"} <= set(raw["responses"]) and "*/*" in raw["responses"]["200"]["content"]
    assert "Range" in [p["name"] for p in raw["parameters"]]


def test_integers_are_strict_in_bodies_and_query_strings(server):
    """Pydantic's lax mode took `"limit": true` as 1 (and false said "at least 1 (got 0)"), 5.0 and "5"
    as 5, and `offset=1_0` or `+10` in an address as 10. An integer in a JSON body is a JSON integer, one in
    a query string plain decimal digits (`-?[0-9]+`); anything else is refused, naming the field."""
    off, client = server
    aid = client.post("/api/artifacts", params={"tool": "api"},
                      content=json.dumps([{"a": i} for i in range(5000)]).encode()).json()["artifact_id"]
    for name in ("offset", "limit", "context"):
        for value in (True, False, 5.0, "5", "1_0"):
            answer = client.post(f"/api/artifacts/{aid}/query", json={"grep": "a", name: value})
            body = answer.json()
            assert (answer.status_code, body["error"]) == (422, "invalid_argument"), (name, value, body)
            assert body["message"].startswith(f"body.{name}: "), body
    page = client.post(f"/api/artifacts/{aid}/query", json={"jmespath": "[*].a", "offset": 1, "limit": 2}).json()
    assert (page["result"], page["next_offset"]) == ([1, 2], 3)
    assert client.post(f"/api/artifacts/{aid}/query", json={"grep": "a", "context": 1}).status_code == 200
    numbered = [(f"/api/artifacts/{aid}/slice", "offset"), (f"/api/artifacts/{aid}/slice", "limit"),
                ("/api/artifacts", "limit"), ("/api/extracts", "limit"), ("/api/stats", "top")]
    for path, name in numbered:
        # all of these int() takes (Arabic-Indic and full-width digits too)
        for text in ("1_0", "+10", " 10", "10 ", "١٠", "１０", "true", "1e1", "10.0", ""):
            answer = client.get(path, params={name: text})
            body = answer.json()
            assert (answer.status_code, body["error"]) == (422, "invalid_argument"), (path, name, text, body)
            assert body["message"].startswith(f"query.{name}: ") and "plain decimal" in body["message"], body
        assert client.get(path, params={name: "10"}).status_code == 200, (path, name)
        # digits beyond any 64-bit integer: said so (5,000 of them were Python's "Exceeds the limit (4300
        # digits) ... use sys.set_int_max_str_digits()")
        huge = client.get(path, params={name: "9" * 5000}).json()
        assert huge["message"] == f"query.{name}: Input should be an integer of at most 19 digits (got 5,000 digits)"
    assert client.get(f"/api/artifacts/{aid}/slice", params={"offset": "-1", "unit": "items"}).json()["offset"] == 4999
    bounded = client.get("/openapi.json").json()["paths"]["/api/stats"]["get"]["parameters"][0]
    assert (bounded["name"], bounded["schema"]["type"], bounded["schema"]["minimum"]) == ("top", "integer", 1)
    assert client.get("/api/stats", params={"top": "0"}).status_code == 422
    # the page reads its offset and limit as the API does, and says what is wrong on the page
    for text in ("1_0", "+10"):
        page = client.get(f"/artifacts/{aid}", params={"offset": text})
        assert page.status_code == 200 and "offset must be a whole number" in page.text, text
    assert "must be a whole number" not in client.get(f"/artifacts/{aid}", params={"offset": "-3"}).text


def test_the_openapi_schema_declares_auth_the_namespace_header_and_the_400(server):
    """The schema declared no security (generated clients sent no token), not the X-Offload-Namespace
    header the guard reads, and not the 400 a JSON body that is not UTF-8 gets."""
    off, client = server
    schema = client.get("/openapi.json").json()
    scheme = schema["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer") and "/login" in scheme["description"]
    operations = [(path, method, op) for path, methods in schema["paths"].items() for method, op in methods.items()]
    assert len(operations) >= 12 and all(path.startswith("/api/") for path, _, _ in operations)
    for path, method, op in operations:  # every route in the schema is behind the guard (/login is not in it)
        assert op["security"] == [{"bearer": []}], (path, method)
        headers = {p["name"]: p for p in op.get("parameters", []) if p["in"] == "header"}
        assert "X-Offload-Namespace" in headers and not headers["X-Offload-Namespace"]["required"], (path, method)
        has_json_body = "application/json" in op.get("requestBody", {}).get("content", {})
        assert ("400" in op["responses"]) == has_json_body, (path, method)
    query = schema["paths"]["/api/artifacts/{artifact_id}/query"]["post"]
    declared = query["responses"]["400"]["content"]["application/json"]["schema"]
    assert declared == {"$ref": "#/components/schemas/ErrorBody"}
    aid = off.put(b"x\n" * 10, tool="t").artifact_id
    answer = client.post(f"/api/artifacts/{aid}/query", content='{"grep": "caf\u00e9"}'.encode("latin-1"),
                         headers={"content-type": "application/json"})
    assert answer.status_code == 400 and answer.json() == {
        "error": "bad_request", "message": answer.json()["message"], "status": 400}
    # the header is what it says: it picks the namespace
    other = off.for_namespace("team-b").put(b"y\n" * 10, tool="t").artifact_id
    assert [a["id"] for a in client.get("/api/artifacts", headers={"X-Offload-Namespace": "team-b"}).json()["items"]
            ] == [other]


def test_head_answers_wherever_get_does_without_the_body(server):
    """HEAD was a 405 on every route but the raw bytes (RFC 9110: wherever GET is, HEAD is)."""
    off, client = server
    aid = off.put(b"x\n" * 100, tool="t").artifact_id
    for path in ("/api/artifacts", "/api/stats", f"/api/artifacts/{aid}", f"/api/artifacts/{aid}/slice",
                 f"/api/artifacts/{aid}/raw", "/", "/api/artifacts/art_aaaaaaaaaaaaaaaa"):
        got, head = client.get(path), client.head(path)
        assert (head.status_code, head.content) == (got.status_code, b""), path
        assert head.headers["content-length"] == got.headers["content-length"] == str(len(got.content)), path
        assert head.headers["content-type"] == got.headers["content-type"], path


def test_head_reads_no_page_into_the_extract_log(server):
    """`curl -I` of a slice or an artifact's page wrote a row to the extract log each time (and `rerun`
    then re-ran reads nobody made)."""
    off, client = server
    aid = off.put(f"head {uuid.uuid4()}\n".encode() * 100, tool="head").artifact_id  # no artifact read before
    for path in (f"/api/artifacts/{aid}/slice?offset=-5", f"/artifacts/{aid}"):
        assert client.head(path).status_code == 200
    assert [(e["op"], e["args"]) for e in off.extracts(artifact_id=aid)] == []
    assert client.get(f"/api/artifacts/{aid}/slice?offset=-5").status_code == 200
    assert [e["op"] for e in off.extracts(artifact_id=aid)] == ["slice"]


def test_a_non_ascii_namespace_header_is_read_as_utf8(server):
    """Headers are read as Latin-1: "é工" sent as UTF-8 was stored in namespace "Ã©å·¥"."""
    off, client = server
    header = {"X-Offload-Namespace": "é工".encode()}  # its UTF-8 bytes, as curl sends them
    made = client.post("/api/artifacts?tool=hdr", content=b"x\n", headers=header)
    assert made.status_code == 201
    assert [a["id"] for a in off.for_namespace("é工").list()[0]] == [made.json()["artifact_id"]]
    assert [a["id"] for a in client.get("/api/artifacts", headers=header).json()["items"]] == [made.json()["artifact_id"]]
    # bytes that are no UTF-8, as a server receives them (the test client sends its headers re-encoded)
    status, body = _asgi_get(client.app, "/api/artifacts", [(b"x-offload-namespace", "été".encode("latin-1"))])
    assert status == 400 and "not UTF-8" in json.loads(body)["message"]


def _asgi_get(app, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """A GET straight through the ASGI app, with these raw header bytes."""
    import asyncio

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), *headers], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_a_text_filter_too_long_for_the_store_is_refused_as_the_argument(server):
    """60,000 characters were a 503 "store_error" (SQLite: LIKE pattern too complex)."""
    _, client = server
    answer = client.get("/api/artifacts", params={"text": "a" * 60_000})
    assert answer.status_code == 422 and "up to 1,000 characters" in answer.json()["message"]


def test_the_text_filter_reads_the_args_keys_and_values_not_their_json(server):
    """text=" (or {, :) listed every artifact that had args: the filter matched the JSON they are stored as."""
    off, client = server
    plain = off.process("grep", _log(2_000), args={"pattern": "GET /api/items", "path": "."}).artifact_id
    quoting = off.process("grep", _log(2_000), args={"pattern": 'say "hi": {x}'}).artifact_id
    off.process("bash", _log(2_000))  # no args

    def found(text: str) -> set[str]:
        answer = client.get("/api/artifacts", params={"text": text})
        assert answer.status_code == 200 and all("args_text" not in a for a in answer.json()["items"])
        return {a["id"] for a in answer.json()["items"]}

    for text in ('"', "{", "}", ":", '"hi": {x}'):
        assert found(text) == {quoting}, text
    assert found("GET /api/items") == {plain} and found('": "') == set() and found('"pattern"') == set()
    assert client.get("/api/artifacts", params={"text": "pattern"}).json()["items"][0]["args"] == {
        "pattern": 'say "hi": {x}'}  # args come back as they were given
