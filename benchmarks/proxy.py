"""`offload proxy` on a 50 MB tool result: its time next to a raw JSON-RPC read of the same upstream, and its memory.

    python benchmarks/proxy.py [--quick] [--size-mb N] [--rounds N]

The upstream is `mcp-server-git` from PyPI (unmodified) reading a 50 MB application log committed to a
temporary repository (`git_show` with revision `HEAD:<file>` returns the file's text), twice: as generated
(it quotes a few emoji, so a Python str of it takes 4 bytes per character) and as pure ASCII (1 byte per
character). Each round, in turn:

- raw: start the upstream, do the handshake, then time one tools/call from writing the request to holding
  the parsed response (`readline()` on the pipe, `orjson.loads`): the floor any client pays;
- proxy: start `offload proxy -- <the same upstream>` with a fresh SQLite store, do the handshake, offload
  one small result (a 200 KB file: the first reference opens and migrates the store and loads the
  installed tokenizers, ~1-2 s and ~100-200 MB once per process; reported apart as "warm-up"), then time
  the same call the same way (the response is now a reference: the proxy read, parsed, stored and
  previewed the 50 MB first). The proxy's memory comes from /proc: VmRSS before the big call (baseline)
  and VmHWM (peak) after it.

Both clients read JSON-RPC themselves, so the difference is the proxy's work. Goals (issue 6): proxy
within 2x the raw read (more than 4x is a defect); the proxy's peak memory under 3x the payload.
Results: benchmarks/results/proxy.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

C.isolate_env()

import orjson  # noqa: E402

TIME_GOAL, TIME_DEFECT, MEMORY_GOAL = 2.0, 4.0, 3.0


class Peer:
    """A child process spoken to in newline-delimited JSON-RPC, read with a plain readline()."""

    def __init__(self, command: list[str]):
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, bufsize=1 << 20)
        self.next_id = 0

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{method}: the peer exited")
            message = orjson.loads(line)
            if message.get("id") == self.next_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def send(self, message: dict) -> None:
        self.proc.stdin.write(orjson.dumps(message) + b"\n")
        self.proc.stdin.flush()

    def handshake(self) -> dict:
        result = self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                             "clientInfo": {"name": "offload-bench", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return result

    def memory_mb(self, field: str) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024 / C.MB
        raise KeyError(field)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def payloads(size: int) -> dict[str, bytes]:
    """Two 50 MB texts: the log as generated (whole lines of valid UTF-8; it quotes a few emoji, so Python
    holds it as 4 bytes per character once decoded) and the same log with every non-ASCII character
    replaced by "?" (1 byte per character), the two ends of what a str of it costs."""
    data = C.text_data(size, "log")
    text = data[: data.rfind(b"\n") + 1].decode("utf-8", errors="replace")
    return {"log": text.encode(), "ascii log": text.encode("ascii", errors="replace")}


def upstream_for(texts: dict[str, bytes], tmp: Path) -> tuple[list[str], str, dict[str, dict], dict]:
    """The upstream command, its tool, the arguments that return each text, and those of the warm-up."""
    git_server = shutil.which("mcp-server-git") or str(Path(sys.executable).with_name("mcp-server-git"))
    if not Path(git_server).exists():
        raise SystemExit("mcp-server-git is not installed: pip install -e '.[test]'")
    repo = tmp / "repo"
    repo.mkdir()
    names = {}
    for number, (label, data) in enumerate(texts.items()):
        names[label] = f"big{number}.log"
        (repo / names[label]).write_bytes(data)
    (repo / "warm.log").write_bytes(C.text_data(200_000, "log", seed=7).decode("utf-8", "replace").encode())
    git = ["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "logs"], check=True)
    args = {label: {"repo_path": str(repo), "revision": f"HEAD:{name}"} for label, name in names.items()}
    return [git_server], "git_show", args, {"repo_path": str(repo), "revision": "HEAD:warm.log"}


def raw_round(upstream: list[str], tool: str, args: dict, expected: bytes) -> float:
    peer = Peer(upstream)
    try:
        peer.handshake()
        started = time.perf_counter()
        result = peer.request("tools/call", {"name": tool, "arguments": args})
        elapsed = time.perf_counter() - started
        assert result["content"][0]["text"].encode() == expected, "the raw read returned other content"
        return elapsed
    finally:
        peer.close()


def proxy_round(upstream: list[str], tool: str, args: dict, warm_args: dict, store: str) -> dict:
    peer = Peer([sys.executable, "-m", "offload", "--url", store, "proxy", "--", *upstream])
    try:
        peer.handshake()
        started = time.perf_counter()
        warm = peer.request("tools/call", {"name": tool, "arguments": warm_args})
        warm_s = time.perf_counter() - started
        assert "stored whole as art_" in warm["content"][0]["text"]
        baseline = peer.memory_mb("VmRSS")
        started = time.perf_counter()
        result = peer.request("tools/call", {"name": tool, "arguments": args})
        elapsed = time.perf_counter() - started
        peak = peer.memory_mb("VmHWM")
        text = result["content"][0]["text"]
        assert "stored whole as art_" in text, text[:300]
        artifact = text.split("stored whole as ", 1)[1].split(" ", 1)[0]
        started = time.perf_counter()
        page = peer.request("tools/call", {"name": "fetch_slice",
                                           "arguments": {"artifact_id": artifact, "offset": -5}})
        slice_s = time.perf_counter() - started
        assert page["structuredContent"]["returned"] == 5
        return {"seconds": elapsed, "baseline_mb": baseline, "peak_mb": peak, "reference_chars": len(text),
                "reference_tokens_est": len(text) // 4, "fetch_slice_s": slice_s, "warm_up_s": warm_s}
    finally:
        peer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 MB, 2 rounds")
    parser.add_argument("--size-mb", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    options = parser.parse_args()
    size = (options.size_mb or (10 if options.quick else 50)) * C.MB
    rounds = options.rounds or (2 if options.quick else 3)

    texts = payloads(size)
    cases: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="offload-bench-proxy-") as tmp:
        upstream, tool, args, warm_args = upstream_for(texts, Path(tmp))
        for label, expected in texts.items():
            raws, proxied = [], []
            for number in range(rounds):
                raws.append(raw_round(upstream, tool, args[label], expected))
                proxied.append(proxy_round(upstream, tool, args[label], warm_args,
                                           f"sqlite:///{tmp}/{label.replace(' ', '-')}{number}.db"))
                print(f"{label}, round {number + 1}: raw {raws[-1]:.2f} s, proxy {proxied[-1]['seconds']:.2f} s, "
                      f"proxy peak {proxied[-1]['peak_mb']:.0f} MB", file=sys.stderr)
            payload_mb = len(expected) / C.MB
            peak = max(r["peak_mb"] for r in proxied)
            baseline = C.med([r["baseline_mb"] for r in proxied])
            cases[label] = {
                "payload_bytes": len(expected), "raw_seconds": raws, "proxy": proxied,
                "raw_median_s": C.med(raws), "proxy_median_s": C.med([r["seconds"] for r in proxied]),
                "fetch_slice_median_s": C.med([r["fetch_slice_s"] for r in proxied]),
                "warm_up_median_s": C.med([r["warm_up_s"] for r in proxied]),
                "peak_mb": peak, "baseline_mb": baseline, "payload_mb": payload_mb,
                "memory_ratio_above_baseline": (peak - baseline) / payload_mb, "reference_chars":
                    proxied[0]["reference_chars"]}
            cases[label]["time_ratio"] = cases[label]["proxy_median_s"] / cases[label]["raw_median_s"]

    print(f"\n`{Path(upstream[-1]).name} {tool}` of a {size / C.MB:.0f} MB file, {rounds} rounds, medians (ms)\n")
    rows = []
    for label, case in cases.items():
        ratio = case["time_ratio"]
        verdict = "goal met" if ratio <= TIME_GOAL else ("within the floor" if ratio <= TIME_DEFECT else "DEFECT")
        rows.append([label, C.fmt_ms(case["raw_median_s"]), C.fmt_ms(case["proxy_median_s"]),
                     f"{ratio:.2f}x ({verdict})", C.fmt_ms(case["fetch_slice_median_s"]),
                     C.fmt_ms(case["warm_up_median_s"])])
    print(C.table(["payload", "raw read", "through the proxy", "proxy / raw", "fetch_slice (last 5 lines)",
                   "first reference of a process (200 KB)"], rows))
    print()
    rows = []
    for label, case in cases.items():
        ratio = case["memory_ratio_above_baseline"]
        rows.append([label, f"{case['baseline_mb']:.0f}", f"{case['peak_mb']:.0f}",
                     f"{case['peak_mb'] - case['baseline_mb']:.0f}",
                     f"{ratio:.2f}x ({'goal met' if ratio < MEMORY_GOAL else 'over the goal'})"])
    print(C.table(["payload", "proxy RSS before (MB)", "peak RSS (MB)", "peak - before (MB)",
                   "(peak - before) / payload"], rows))
    print(f"\nreference: {next(iter(cases.values()))['reference_chars']:,} chars")
    path = C.write_results("proxy", {"upstream": upstream, "tool": tool, "rounds": rounds, "cases": cases,
                                     "time_goal": TIME_GOAL, "time_defect": TIME_DEFECT,
                                     "memory_goal": MEMORY_GOAL, "load_avg_after": os.getloadavg()})
    print(f"\nwritten to {path.relative_to(C.ROOT)}")


if __name__ == "__main__":
    main()
