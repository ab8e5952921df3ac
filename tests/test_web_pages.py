"""The web page in-process (FastAPI's TestClient): pages render, escape hostile content, show friendly
404/410 pages, keep the request's namespace, and never hold more than one slice page of a big artifact.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from offload import Offloader
from offload.api import ApiConfig, create_app
from offload.api.web import PAGE_SIZE, human_bytes, human_count
from offload.store.models import artifacts

LOCAL = "http://127.0.0.1:8765"
HOSTILE_TOOL = '<script>alert("tool")</script>'
HOSTILE_SESSION = "<img src=x onerror=alert(1)>"


def grep_output(lines: int = 40_000) -> str:
    """A grep that walked node_modules: every line unique (`value{i}`), a few MB in all."""
    return "\n".join(f"node_modules/pkg{i % 300}/lib/file{i % 97}.js:{i % 1000 + 1}:  const value{i} = "
                     f"require('lodash'); // TODO remove before release" for i in range(lines))


@pytest.fixture
def off(sqlite_url):
    with Offloader(sqlite_url) as offloader:
        yield offloader


@pytest.fixture
def client(off):
    with TestClient(create_app(off), base_url=LOCAL) as test_client:
        yield test_client


@pytest.fixture
def big(off):
    """A multi-MB grep output, stored."""
    ref = off.put(grep_output(), tool="grep", session="s1", args={"pattern": "require", "path": "."})
    assert ref.bytes > 3_000_000
    return ref.artifact_id


def page(client: TestClient, path: str, status: int = 200, **params) -> str:
    response = client.get(path, params=params or None)  # an empty dict would drop the query in `path`
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("text/html")
    text = response.text
    assert_no_inline_code(text)
    return text


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def assert_no_inline_code(text: str) -> None:
    """The CSP allows only same-origin scripts and styles: no inline script, style element or attribute."""
    parser = _Tags()
    parser.feed(text)
    for tag, attrs in parser.tags:
        if tag == "script":
            assert (attrs.get("src") or "").startswith("/static/"), attrs
        assert tag != "style"
        assert not [name for name in attrs if name == "style" or name.startswith("on")], (tag, attrs)


def section(text: str, element_id: str) -> str:
    """The inner HTML of the element with this id (a <pre> or a <div> holding no nested div of its own)."""
    match = re.search(rf'<(pre|div) id="{element_id}"[^>]*>(.*?)</\1>', text, re.S)
    assert match, element_id
    return match.group(2)


# -- the listing --------------------------------------------------------------------------------

def test_the_list_shows_artifacts_humanized_with_exact_titles_and_stats(client, off, big):
    doc = off.put({"items": [{"id": i, "status": "ok"} for i in range(2000)]}, tool="http_get", session="s2")
    text = page(client, "/")
    meta = off.get(big)
    assert f'href="/artifacts/{big}"' in text and f'href="/artifacts/{doc.artifact_id}"' in text
    assert human_bytes(meta["bytes"]) in text and f'title="{meta["bytes"]:,} bytes"' in text
    assert "pattern=require path=." in text  # the call's arguments, on one line
    stats = off.stats()
    assert human_count(stats["tokens_saved"]) in text
    assert f'title="{stats["tokens_saved"]:,} tokens (estimate)' in text
    assert page(client, "/stats").count("<tr>") >= 5  # header rows, 2 tools, 2 sessions


def test_list_filters_by_tool_session_kind_and_text(client, off):
    off.put("alpha\n" * 50, tool="grep", session="s1", args={"pattern": "needle-in-args"})
    off.put({"a": list(range(100))}, tool="http_get", session="s2")
    off.put("beta\n" * 50, tool="bash", session="s2")

    def tools(**params) -> set[str]:
        return set(re.findall(r'<a class="tool" href="[^"]+">([^<]+)</a>', page(client, "/", **params)))

    assert tools() == {"grep", "http_get", "bash"}
    assert tools(tool="grep") == {"grep"}
    assert tools(session="s2") == {"http_get", "bash"}
    assert tools(kind="json") == {"http_get"}
    assert tools(text="needle-in-args") == {"grep"}
    assert tools(tool="", session="", kind="", text="") == {"grep", "http_get", "bash"}  # an empty form
    assert "No artifact matches these filters" in page(client, "/", tool="nothing-like-this")


def test_list_pages_with_a_cursor_and_keeps_the_filters(client, off):
    made = {off.put(f"result {i}\n" * 20, tool="grep", session="many").artifact_id for i in range(PAGE_SIZE + 5)}
    off.put("other\n" * 20, tool="bash", session="many")
    first = page(client, "/", tool="grep")
    next_link = re.search(r'<a class="button" rel="next" href="([^"]+)"', first)
    assert next_link, "a next-page link"
    href = html.unescape(next_link.group(1))
    assert "tool=grep" in href and "cursor=" in href
    second = page(client, href)
    seen = set(re.findall(r'href="/artifacts/(art_[a-z0-9]+)"', first + second))
    assert seen == made  # every grep artifact once over the two pages, and no bash
    assert 'rel="next"' not in second and "First page" in second


def test_a_bad_cursor_is_a_friendly_422_page(client):
    text = page(client, "/", status=422, cursor="not-a-cursor")
    assert "invalid cursor" in text and "All artifacts" in text


# -- the artifact view --------------------------------------------------------------------------

def test_the_artifact_view_shows_what_the_model_saw_exactly(client, off, big):
    text = page(client, f"/artifacts/{big}")
    assert html.unescape(section(text, "reference-text")) == off.reference(big)["text"]
    meta = off.get(big)
    # a multi-MB result's token figure comes from a sample, and the page says so as the reference does
    assert f'title="{meta["tokens"]:,} tokens (estimated from a sample) in the raw result"' in text
    assert 'href="/api/artifacts/%s/raw"' % big in text
    first = off.fetch_slice(big)
    label = f"lines 0–{first['returned'] - 1:,} of {meta['lines']:,}"
    assert label in text
    assert f'href="/artifacts/{big}?unit=lines&amp;offset={first["next_offset"]}"' in text  # Next, without script


def test_the_shape_is_a_tree_and_hints_are_offered(client, off):
    doc = {"meta": {"source": "api"}, "items": [{"id": i, "status": ["ok", "error"][i % 2], "tags": ["a", "b"]}
                                                for i in range(3000)]}
    aid = off.put(doc, tool="http_get").artifact_id
    text = page(client, f"/artifacts/{aid}")
    tree = text[text.index('class="shape-tree'):]
    assert tree.count("<details") >= 2 and "array[3,000] of objects" in tree
    assert re.search(r'<span class="shape-key">status</span>', tree)
    assert re.search(r'title="1,500 times">error <b>1,500</b>', tree)  # value counts, exact in the title
    assert "0 – 2,999" in tree  # a numeric range, humanized
    offered = [html.unescape(expr) for expr in re.findall(r'data-expr="([^"]*)"', text)]
    assert offered == off.reference(aid)["hints"] and offered
    assert '<option value="items" selected>' in text  # a JSON array pages by items first


def test_a_csv_shape_is_a_table_of_columns(client, off):
    aid = off.put("id,city,temp\n" + "\n".join(f"{i},Oslo,{i % 30}" for i in range(5000)), tool="read_file").artifact_id
    text = page(client, f"/artifacts/{aid}")
    assert "5,000 rows × 3 columns" in text and '<td class="mono">city</td>' in text
    assert '<option value="sql">SQL</option>' in text


def test_binary_content_is_a_hexdump_of_one_page(client, off):
    data = bytes(range(256)) * 400
    aid = off.put(data, tool="download").artifact_id
    text = page(client, f"/artifacts/{aid}")
    dump = html.unescape(section(text, "page-body"))
    assert "00000000  00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f  ................" in dump
    assert "00000040  40 41 42 43 44 45 46 47 48 49 4a 4b 4c 4d 4e 4f  @ABCDEFGHIJKLMNO" in dump
    assert len(dump) < 10 * off.fetch_slice(aid, unit="bytes")["returned"]
    assert "Binary data has no query language" in text


def test_a_unit_that_does_not_apply_shows_why_on_the_page(client, big):
    text = page(client, f"/artifacts/{big}", unit="items")
    assert re.search(r'<p id="page-error" class="error">[^<]*unit=&#34;items&#34; needs a JSON array', text)


@pytest.mark.parametrize("params, says", [
    ({"offset": "ten"}, "offset must be a whole number (got &#39;ten&#39;)"),
    ({"limit": "1.5"}, "limit must be a whole number"), ({"limit": "0"}, "limit must be at least 1"),
    ({"limit": "-1"}, "limit must not be negative"), ({"offset": str(10**30)}, "offset 1" + "0" * 30 + " is out of range"),
])
def test_a_mistyped_offset_or_limit_is_said_on_the_page(client, big, params, says):
    text = page(client, f"/artifacts/{big}", **params)  # a page, not FastAPI's JSON
    assert re.search(r'<p id="page-error" class="error">[^<]*' + re.escape(says), text), text[:2000]


@pytest.mark.parametrize("params", [
    {}, {"offset": 20_000}, {"offset": -40}, {"limit": 10_000_000}, {"unit": "chars", "limit": 100_000_000},
    {"unit": "bytes", "offset": 1_000_000, "limit": 100_000_000}, {"unit": "lines", "offset": 39_999, "limit": 5},
])
def test_no_page_holds_more_than_one_slice_page_of_a_big_artifact(client, off, big, params):
    text = page(client, f"/artifacts/{big}", **params)
    unit = params.get("unit", "lines")
    one_page = off.fetch_slice(big, offset=params.get("offset", 0), limit=params.get("limit"), unit=unit)
    shown = set(re.findall(r"value(\d+) =", html.unescape(text)))
    expected = set(re.findall(r"value(\d+) =", one_page["content"]))
    in_reference = set(re.findall(r"value(\d+) =", off.reference(big)["text"]))
    assert shown <= expected | in_reference
    assert expected <= shown  # the page itself is there, whole
    assert len(text) < 100_000 < off.get(big)["bytes"] // 30


def test_every_page_escapes_hostile_content(client, off):
    payload = "\n".join(f"line {i} <script>alert({i})</script> & </pre><u>bold</u>" for i in range(3000))
    hostile = off.put(payload, tool=HOSTILE_TOOL, session=HOSTILE_SESSION,
                      args={"q": "</textarea><script>alert('args')</script>"}).artifact_id
    doc = {"<u>key</u>": [{"<i>field</i>": "<script>alert('value')</script>", "n": i} for i in range(500)]}
    hostile_json = off.put(doc, tool=HOSTILE_TOOL).artifact_id
    off.query_artifact(hostile, grep="<script>alert\\(1\\d\\)")  # the extract log holds hostile text too
    pages = [page(client, "/"), page(client, "/", session=HOSTILE_SESSION), page(client, "/", text="<script>"),
             page(client, "/stats"), page(client, f"/artifacts/{hostile}"),
             page(client, f"/artifacts/{hostile}", unit="chars"), page(client, f"/artifacts/{hostile_json}"),
             page(client, "/artifacts/<img src=x onerror=alert(404)>", status=404)]
    for text in pages:
        assert "<script>alert" not in text and "<img src=x" not in text
        assert "<u>" not in text and "<i>field" not in text and "</textarea><script>" not in text
    assert "&lt;script&gt;alert(&#34;tool&#34;)&lt;/script&gt;" in pages[0]
    assert "&lt;img src=x onerror=alert(1)&gt;" in pages[1]
    assert "line 0 &lt;script&gt;alert(0)&lt;/script&gt; &amp; &lt;/pre&gt;&lt;u&gt;bold&lt;/u&gt;" in pages[4]
    assert "&lt;u&gt;key&lt;/u&gt;" in pages[6] and "&lt;i&gt;field&lt;/i&gt;" in pages[6]


# -- errors ---------------------------------------------------------------------------------------

def test_an_unknown_artifact_is_a_friendly_404_page(client):
    text = page(client, "/artifacts/art_doesnotexist", status=404)
    assert "Not found" in text and "art_doesnotexist" in text and 'href="/"' in text


def test_a_deleted_or_expired_artifact_is_a_410_page(client, off):
    gone = off.put("x\n" * 5000, tool="bash").artifact_id
    off.delete(gone)
    text = page(client, f"/artifacts/{gone}", status=410)
    assert "Gone" in text and "was deleted" in text

    old = off.put("y\n" * 5000, tool="bash").artifact_id
    with off.store.engine.begin() as conn:  # its time is up (gc has not run yet)
        yesterday = sa.func.datetime("now", "-1 day")
        conn.execute(artifacts.update().where(artifacts.c.id == old).values(expires_at=yesterday))
    text = page(client, f"/artifacts/{old}", status=410)
    assert "Gone" in text and "expired" in text and "pinned" in text


# -- namespaces and sign-in -----------------------------------------------------------------------

def test_pages_keep_the_namespace_they_were_asked_for(client, off):
    mine = off.put("default\n" * 3000, tool="grep").artifact_id
    theirs = off.for_namespace("team-a").put("team a\n" * 3000, tool="bash", session="t1").artifact_id
    default_list = page(client, "/")
    assert mine in default_list and theirs not in default_list
    team_list = page(client, "/", namespace="team-a")
    assert theirs in team_list and mine not in team_list
    assert f'href="/artifacts/{theirs}?namespace=team-a"' in team_list
    assert 'href="/?session=t1&amp;namespace=team-a"' in team_list
    view = page(client, f"/artifacts/{theirs}", namespace="team-a")
    assert 'data-namespace="team-a"' in view  # the script sends it with every API call
    page(client, f"/artifacts/{theirs}", status=404)  # not in the default namespace
    page(client, f"/artifacts/{mine}", status=404, namespace="team-a")


def test_a_browser_signs_in_with_a_token_kept_in_a_cookie(off):
    off.put("secret\n" * 3000, tool="grep")
    with TestClient(create_app(off, ApiConfig(tokens={"tok-123": None})), base_url=LOCAL) as client:
        assert client.get("/").status_code == 401
        assert "Sign in" in page(client, "/login")
        refused = client.post("/login", data={"token": "wrong"}, follow_redirects=False)
        assert refused.status_code == 401 and "not valid" in refused.text
        signed = client.post("/login", data={"token": "tok-123"}, follow_redirects=False)
        assert signed.status_code == 303 and signed.headers["location"] == "/"
        cookie = signed.headers["set-cookie"]
        assert "offload_token=tok-123" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert "grep" in page(client, "/")  # the client keeps the cookie


def test_static_files_and_security_headers(client):
    for name, kind in (("artifact.js", "javascript"), ("style.css", "text/css")):
        response = client.get(f"/static/{name}")
        assert response.status_code == 200 and kind in response.headers["content-type"]
    listing = client.get("/")
    assert "script-src 'self'" in listing.headers["content-security-policy"]
    assert listing.headers["x-frame-options"] == "DENY"
    assert client.get("/static/%2e%2e/web.py").status_code == 404
    script = client.get("/static/artifact.js").text
    assert not re.search(r"\.(inner|outer)HTML\s*=|insertAdjacentHTML|document\.write|eval\(|new Function", script)
