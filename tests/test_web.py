"""The web page in a real headless Chromium: the real server on a loopback port over a real SQLite store.

Open the list, open an artifact, page forward and back, run queries and see the results. Debian's
`chromium` is driven by Playwright through `executable_path` (no downloaded browser). The test skips when
either is missing here, and fails instead in CI, where .ci/run installs chromium and sets
OFFLOAD_REQUIRE_BROWSER=1. Screenshots go to OFFLOAD_SCREENSHOT_DIR when it is set.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from pathlib import Path

import pytest

from offload import Offloader
from offload.api import create_app

CHROMIUM = "/usr/bin/chromium"
# read at import: conftest's isolated_env removes OFFLOAD_* variables before each test runs
REQUIRE_BROWSER = os.environ.get("OFFLOAD_REQUIRE_BROWSER") == "1"
SCREENSHOT_DIR = os.environ.get("OFFLOAD_SCREENSHOT_DIR")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def _need_browser() -> None:
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install playwright; no `playwright install` needed)")
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    if missing:
        reason = "the browser test needs " + " and ".join(missing)
        if REQUIRE_BROWSER:
            pytest.fail(reason + ", and this run requires it (OFFLOAD_REQUIRE_BROWSER=1)")
        pytest.skip(reason)


def _seed(off: Offloader) -> dict[str, str]:
    grep = "\n".join(f"node_modules/pkg{i % 300}/lib/file{i % 97}.js:{i % 1000 + 1}:  const value{i} = "
                     "require('lodash'); // TODO remove" for i in range(40_000))
    doc = {"meta": {"total": 3000, "source": "api"},
           "items": [{"id": i, "name": f"user{i}", "status": ["ok", "error", "pending"][i % 3], "score": i * 1.5}
                     for i in range(3000)]}
    log = "".join(f"2026-12-01T10:{i // 60 % 60:02d}:{i % 60:02d}Z INFO worker-{i % 8} processed batch {i}\n"
                  for i in range(20_000)) + "ValueError: batch 20000 is corrupt\n"
    return {
        "grep": off.put(grep, tool="grep", session="s1", args={"pattern": "require", "path": "."}).artifact_id,
        "json": off.put(doc, tool="http_get", session="s1", args={"url": "https://api.example.com/users"}).artifact_id,
        "log": off.put({"stdout": log, "stderr": "warning: disk 91% full\n", "exit_code": 1}, tool="bash",
                       session="s2", args={"command": "make test"}).artifact_id,
    }


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The real app under uvicorn on a free loopback port, in a thread of this process."""
    _need_browser()
    import uvicorn

    with pytest.MonkeyPatch.context() as env:  # isolated like conftest's isolated_env, for the whole module
        for key in [k for k in os.environ if k.startswith("OFFLOAD_")]:
            env.delenv(key)
        home = tmp_path_factory.mktemp("home")
        for name, path in (("HOME", home), ("XDG_DATA_HOME", home / "data"), ("XDG_CONFIG_HOME", home / "config")):
            env.setenv(name, str(path))
        off = Offloader(f"sqlite:///{tmp_path_factory.mktemp('web') / 'store.db'}")
    ids = _seed(off)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))  # the port is ours from here on: nothing can take it before uvicorn serves
    server = uvicorn.Server(uvicorn.Config(create_app(off), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", ids, off
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()
    off.close()


@pytest.fixture(scope="module")
def browser(site):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, tmp_path):
    """A fresh laptop-sized page that records console errors and uncaught exceptions (a CSP violation is one)."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    tab.problems = []
    tab.on("console", lambda message: tab.problems.append(message.text) if message.type == "error" else None)
    tab.on("pageerror", lambda error: tab.problems.append(f"uncaught: {error}"))
    shots = Path(SCREENSHOT_DIR or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    tab.shoot = lambda name: tab.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    yield tab
    context.close()


def _range(label: str) -> tuple[int, int]:
    first, last = re.search(r"([\d,]+)–([\d,]+)", label).groups()
    return int(first.replace(",", "")), int(last.replace(",", ""))


def test_list_open_page_forward_and_query(site, page):
    from playwright.sync_api import expect

    base, ids, off = site
    page.goto(base + "/")
    expect(page.locator("table.artifacts tbody tr")).to_have_count(3)
    expect(page.locator(".summary")).to_contain_text("Tokens kept out of context")
    page.shoot("list")

    page.locator("a.tool", has_text="grep").click()
    expect(page).to_have_url(re.compile(f"/artifacts/{ids['grep']}$"))
    expect(page.locator("h1")).to_contain_text("grep")
    expect(page.locator("#reference-text")).to_have_text(off.reference(ids["grep"])["text"])
    label = page.locator("#page-label")
    expect(label).to_have_text(re.compile(r"^lines 0–[\d,]+ of 40,000$"))
    first, last = _range(label.inner_text())

    page.locator("#page-next").click()  # through the JSON API, not a page load
    expect(label).to_have_text(re.compile(rf"^lines {last + 1:,}–"))
    expect(page.locator(".lines .ln").first).to_have_text(str(last + 1))
    expect(page.locator(".lines .tx").first).to_contain_text(f"const value{last + 1} = require")
    expect(page).to_have_url(re.compile(rf"\?unit=lines&offset={last + 1}$"))
    lines_on_page = page.locator(".lines .tx").count()
    assert 0 < lines_on_page <= 200  # one bounded page, never the whole artifact

    page.locator("#page-prev").click()
    expect(label).to_have_text(re.compile(r"^lines 0–"))

    page.locator("#query-expr").fill(r"const value4242 =")
    page.locator("#query-run").click()
    result = page.locator("#query-result")
    expect(result).to_contain_text("1 result")
    expect(result).to_contain_text("4242: node_modules/pkg42/lib/file71.js:243:  const value4242 = require")
    expect(page.locator("#extracts-body")).to_contain_text("const value4242 =")  # the log shows the query
    page.shoot("artifact-grep")
    assert page.problems == []


def test_json_artifact_shape_sql_and_a_derived_result(site, page):
    from playwright.sync_api import expect

    base, ids, _off = site
    page.goto(base + "/")
    page.locator("select[name=kind]").select_option("json")
    page.locator(".filters button[type=submit]").click()
    expect(page.locator("table.artifacts tbody tr")).to_have_count(1)
    page.locator("a.tool", has_text="http_get").click()

    tree = page.locator(".shape-tree")
    expect(tree).to_contain_text("array[3,000] of objects")
    expect(tree.locator(".value", has_text="error")).to_have_count(1)
    expect(page.locator("#page-label")).to_have_text(re.compile(r"^items 0–"))

    page.locator("#query-op").select_option("sql")
    page.locator("#query-expr").fill("SELECT status, count(*) AS n FROM artifact GROUP BY status ORDER BY status")
    page.locator("#query-run").click()
    rows = page.locator("#query-result tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text("error")
    expect(rows.first).to_contain_text("1000")
    page.shoot("artifact-json")

    # a hint the model got, whose 1,000 items are too many to show inline: it becomes a derived artifact
    page.locator("button.hint", has_text="items[?status=='error']").click()
    derived = page.locator("#query-result .derived a")
    expect(derived).to_have_text(re.compile(r"^art_"))
    expect(page.locator("#query-result .derived pre")).to_contain_text("was stored whole as")
    derived.click()
    expect(page.locator("h1")).to_contain_text("query_artifact")
    expect(page.locator("dl.meta")).to_contain_text(ids["json"])  # Derived from
    assert page.problems == []


def test_a_log_pages_to_its_end(site, page):
    from playwright.sync_api import expect

    base, ids, _off = site
    page.goto(f"{base}/artifacts/{ids['log']}")
    expect(page.locator("dl.meta")).to_contain_text("warning: disk 91% full")
    page.locator("#page-end").click()
    expect(page.locator("#page-label")).to_have_text(re.compile(r"–20,000 of 20,001$"))
    expect(page.locator(".lines .tx").last).to_have_text("ValueError: batch 20000 is corrupt")
    expect(page.locator("#page-next")).to_have_attribute("aria-disabled", "true")
    expect(page.locator("#extracts-body")).to_contain_text("offset -")  # reading the end was logged
    page.locator("#page-wrap").uncheck()
    expect(page.locator("#page-body")).not_to_have_class(re.compile(r"\bwrap\b"))
    page.shoot("artifact-log")
    assert page.problems == []


def test_a_filtered_array_pages_within_itself_and_prev_goes_to_the_page_before(site, page):
    """Next dropped the path from the address (a reload showed the main array), End went to the end of the
    main array ("of 3,000" for 1,000 errors), and Prev after End went back to the first page."""
    from urllib.parse import parse_qs, urlsplit

    from playwright.sync_api import expect

    base, ids, _off = site
    errors = "items[?status=='error']"
    page.goto(f"{base}/artifacts/{ids['json']}?unit=items&limit=3&path={errors}")
    expect(page.locator("#page-label")).to_have_text("items 0–2 of 1,000")
    page.locator("#page-next").click()
    expect(page.locator("#page-label")).to_have_text("items 3–5 of 1,000")
    assert parse_qs(urlsplit(page.url).query)["path"] == [errors]
    page.reload()
    expect(page.locator("#page-label")).to_have_text("items 3–5 of 1,000")
    page.locator("#page-end").click()
    expect(page.locator("#page-label")).to_have_text(re.compile(r"^items [\d,]+–999 of 1,000$"))
    first, _ = _range(page.locator("#page-label").text_content())
    shown = 1000 - first
    page.locator("#page-prev").click()
    expect(page.locator("#page-label")).to_have_text(f"items {first - shown:,}–{first - 1:,} of 1,000")
    page.locator("#page-offset").fill("-2")
    page.locator("#page-goto button").click()
    expect(page.locator("#page-label")).to_have_text("items 998–999 of 1,000")
    assert page.problems == []


def test_the_plain_pager_links_keep_the_array(site):
    import urllib.request
    from html import unescape
    from urllib.parse import parse_qs, urlsplit

    base, ids, _off = site
    html = urllib.request.urlopen(f"{base}/artifacts/{ids['json']}?unit=items&limit=3&offset=3&"
                                  "path=items%5B%3Fstatus%3D%3D%27error%27%5D").read().decode()
    for link in ("page-start", "page-prev", "page-next", "page-end"):
        href = unescape(re.search(rf'id="{link}" href="([^"]*)"', html).group(1))
        query = parse_qs(urlsplit(href).query)
        assert query["path"] == ["items[?status=='error']"] and query["limit"] == ["3"], (link, href)
