"""`offload serve` as a real process: beside a writer and `offload ls` on the same embedded store, no error;
off loopback it refuses to start without a token; a 1 GB download streams in bounded memory (slow)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

WRITER = """
import sys
from offload import Offloader
off = Offloader(sys.argv[1])
for i in range(int(sys.argv[2])):
    text = "".join(f"writer line {i}.{j} " + "x" * (j % 40) + "\\n" for j in range(3000))
    ref = off.put(text, tool="writer", session="concurrency")
    print(ref.artifact_id, ref.sha256, flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(url: str, *extra: str, port: int | None = None) -> tuple[subprocess.Popen, str]:
    port = port or free_port()
    proc = subprocess.Popen([sys.executable, "-m", "offload", "--url", url, "serve", "--port", str(port), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.stdout.read().decode()[-3000:])
        try:
            if httpx.get(f"{base}/api/stats", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the server did not start")


def test_writer_serve_and_ls_share_the_default_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    subprocess.run([sys.executable, "-m", "offload", "--url", url, "db", "upgrade"], check=True, capture_output=True)
    server, base = start_server(url)
    try:
        writer = subprocess.Popen([sys.executable, "-c", WRITER, url, "40"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        listings = 0
        while writer.poll() is None:
            ls = subprocess.run([sys.executable, "-m", "offload", "--url", url, "ls", "--json", "--limit", "5"],
                                capture_output=True, text=True)
            assert ls.returncode == 0, ls.stderr
            json.loads(ls.stdout)
            assert httpx.get(f"{base}/api/artifacts", params={"limit": 5}).status_code == 200
            listings += 1
        out, err = writer.communicate()
        assert writer.returncode == 0, err
        stored = dict(line.split() for line in out.splitlines())
        assert len(stored) == 40 and listings > 0
        seen, cursor = {}, None
        while True:
            page = httpx.get(f"{base}/api/artifacts", params={"limit": 15, **({"cursor": cursor} if cursor else {})}).json()
            seen.update({a["id"]: a for a in page["items"]})
            cursor = page["next_cursor"]
            if not cursor:
                break
        assert set(seen) == set(stored)
        for artifact_id, sha in list(stored.items())[::7]:
            raw = httpx.get(f"{base}/api/artifacts/{artifact_id}/raw").content
            assert hashlib.sha256(raw).hexdigest() == sha
    finally:
        server.terminate()
        server.wait(10)


def test_refuses_to_listen_off_loopback_without_a_token(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    out = subprocess.run([sys.executable, "-m", "offload", "--url", url, "serve", "--host", "0.0.0.0", "--port",
                          str(free_port())], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "without a token" in out.stderr


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))


@pytest.mark.slow
def test_a_1gb_download_streams_in_bounded_memory(tmp_path):
    url = f"sqlite:///{tmp_path / 'big.db'}"
    make = ("import sys; from offload.store import Store, open_engine, new_id\n"
            "import hashlib\n"
            "block = b''.join(b'%08d some log text for the download test\\n' % i for i in range(20000))\n"
            "n = (1 << 30) // len(block) + 1\n"
            "h = hashlib.sha256()\n"
            "for _ in range(n): h.update(block)\n"
            "s = Store(open_engine(sys.argv[1]))\n"
            "s.put({'id': 'art_onegigabyte0000', 'namespace': '', 'tool': 't', 'kind': 'text',\n"
            "       'content_type': 'text/plain', 'tokens': 1, 'shown_tokens': 1}, (block for _ in range(n)),"
            " h.hexdigest())\n"
            "print(h.hexdigest(), n * len(block))\n")
    made = subprocess.run([sys.executable, "-c", make, url], capture_output=True, text=True, check=True)
    sha, size = made.stdout.split()
    server, base = start_server(url)
    try:
        httpx.get(f"{base}/api/artifacts/art_onegigabyte0000")  # warm up: imports and store opened
        before_kb = _status_kb(server.pid, "VmRSS")
        digest, received = hashlib.sha256(), 0
        with httpx.stream("GET", f"{base}/api/artifacts/art_onegigabyte0000/raw", timeout=120) as response:
            for block in response.iter_bytes():
                digest.update(block)
                received += len(block)
        growth_mb = (_status_kb(server.pid, "VmHWM") - before_kb) / 1024
        assert (digest.hexdigest(), received) == (sha, int(size))
        assert growth_mb < 100, f"the server grew by {growth_mb:.0f} MB while streaming 1 GB"
    finally:
        server.terminate()
        server.wait(10)
        os.remove(tmp_path / "big.db")
