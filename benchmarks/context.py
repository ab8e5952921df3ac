"""fit_context time for 100, 400 and 1,000-message conversations, on first sight and in the steady state.

    python benchmarks/context.py [--quick] [--rounds 25]

Conversations like issue 4's: a system prompt, one task, then tool calls between user/assistant talk; 15%
of the messages are tool results made of real data from this machine, 1 KB to 2 MB (`grep -rn` over the
stdlib, JSON of the installed packages and their files, stdlib file contents), every one distinct. Each
size is fitted to a 128k and a 6k window (OpenAI Chat Completions messages), on a SQLite store:

- first sight: a new Offloader (empty caches) on a new store, the raw conversation: every message is
  counted, and every result that leaves the context hashed and stored. One run (it stores tens of MB).
- steady state: the agent loop. Each round appends one exchange (an assistant message calling a tool and
  its result, 2-6 KB of real text) to the fitted list and fits again, so each round stores what the new
  exchange pushes out (an older result, a span); median of --rounds rounds. Also "refit": the fitted
  list passed back with nothing new; and "history": a caller that keeps its own full history (raw
  results) and fits all of it each round (recognised by identity: no hashing, no storing again).

Baseline, measured in the same process: orjson.dumps of the fitted list, which the HTTP client pays on
every call anyway. Goal: the steady state under 50 ms for 400 messages.
--quick: results up to 300 KB and 9 rounds. Results: benchmarks/results/context.json.
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import importlib.metadata
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

C.isolate_env()

import orjson  # noqa: E402

SIZES = [2_000_000, 900_000, 300_000, 120_000, 40_000, 12_000, 4_000, 1_000]
PATTERNS = ["def ", "import", "self\\.", "return", "raise", "class ", "except", "yield", "lambda", "with "]
WINDOWS = [128_000, 6_000]
GOAL_S = 0.050


# -- real data ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def grep_output(pattern: str) -> bytes:
    return subprocess.run(["grep", "-rn", "--include=*.py", "--exclude-dir=site-packages", pattern, str(C.STDLIB)],
                          capture_output=True).stdout


@functools.lru_cache(maxsize=None)
def sources() -> str:
    files = sorted(p for p in C.STDLIB.rglob("*.py") if "site-packages" not in p.parts)
    return "".join(p.read_text(encoding="utf-8", errors="replace") for p in files)


@functools.lru_cache(maxsize=None)
def sources_bytes() -> bytes:
    return sources().encode()


@functools.lru_cache(maxsize=None)
def packages() -> list[dict]:
    return sorted(({"name": d.metadata["Name"], "version": d.version, "requires": d.requires or [],
                    "files": [{"path": str(f), "size": f.size} for f in (d.files or [])]}
                   for d in importlib.metadata.distributions()), key=lambda p: p["name"].lower())


def cut(data: bytes, size: int, start: int) -> str:
    start = start % max(1, len(data) - size)
    return data[start:start + size].decode("utf-8", "ignore")


def metadata_json(size: int, start: int) -> str:
    pkgs, chosen, total = packages(), [], 0
    for k in range(len(pkgs)):
        length = len(orjson.dumps(pkgs[(start + k) % len(pkgs)]))
        if total + length <= size:
            chosen.append(pkgs[(start + k) % len(pkgs)])
            total += length
        if total >= 0.8 * size:
            break
    return json.dumps({"count": len(chosen), "packages": chosen}, separators=(",", ":"))


def result(k: int, size: int) -> tuple[str, str, str]:
    """(tool, arguments, result) number k: distinct for every k."""
    if k % 3 == 0:
        pattern = PATTERNS[k // 3 % len(PATTERNS)]
        return "grep", json.dumps({"pattern": pattern}), cut(grep_output(pattern), size, k * 7_919)
    if k % 3 == 1:
        return "pip_inspect", json.dumps({"start": k}), metadata_json(size, k * 13)
    return "read_file", json.dumps({"path": f"stdlib#{k}"}), cut(sources_bytes(), size, k * 104_729)


def conversation(messages: int, max_size: int) -> list[dict]:
    tools = max(1, round(messages * 0.15))
    out = [{"role": "system", "content": "You are a careful coding agent. Use the tools; cite what you read."},
           {"role": "user", "content": "Audit the standard library's error handling and report what you find."}]
    talk = messages - 2 - 2 * tools
    text = sources()
    for k in range(tools):
        name, args, body = result(k, min(SIZES[k % len(SIZES)], max_size))
        out.append({"role": "assistant", "content": f"Step {k}.", "tool_calls": [
            {"id": f"call_{k}", "type": "function", "function": {"name": name, "arguments": args}}]})
        out.append({"role": "tool", "tool_call_id": f"call_{k}", "content": body})
        for j in range(talk // tools + (k < talk % tools)):
            start = (k * 31 + j) * 977 % (len(text) - 2_000)
            out.append({"role": "assistant" if j % 2 == 0 else "user", "content": text[start:start + 300 + j * 150]})
    assert len(out) == messages, len(out)
    return out


def exchange(n: int) -> list[dict]:
    name, args, body = result(10_000 + n, 2_000 + (n * 1_373) % 4_000)
    return [{"role": "assistant", "content": None, "tool_calls": [
                {"id": f"next_{n}", "type": "function", "function": {"name": name, "arguments": args}}]},
            {"role": "tool", "tool_call_id": f"next_{n}", "content": body}]


def timed(fn) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# -- one cell ----------------------------------------------------------------------------------------

def measure(stores: C.Stores, messages: int, window: int, rounds: int, max_size: int) -> dict:
    from offload import Offloader

    original = conversation(messages, max_size)
    url = stores.url("sqlite")
    off = Offloader(url)
    off.store  # opened and migrated before the clock starts
    raw_bytes = sum(len(m["content"].encode()) for m in original if m["role"] == "tool")

    t0 = time.perf_counter()
    fitted = off.fit_context(original, window)
    first = time.perf_counter() - t0
    report = fitted.report
    stored_after_first = len(off.list(limit=10_000)[0])

    refit_times, dumps_times = [], []
    for _ in range(rounds):  # interleaved, so that noise hits both alike
        refit_times.append(timed(lambda: off.fit_context(fitted.messages, window)))
        dumps_times.append(timed(lambda: orjson.dumps(fitted.messages)))

    history = list(original)
    off.fit_context(history, window)
    history_times, steady_times, stored = [], [], []
    current = fitted.messages
    for n in range(rounds):
        new = exchange(n)
        history.extend(new)
        messages_now = current + new
        gc.collect()
        t0 = time.perf_counter()
        out = off.fit_context(messages_now, window)
        steady_times.append(time.perf_counter() - t0)
        stored.append(len(out.report.artifact_ids))
        current = out.messages
        history_times.append(timed(lambda: off.fit_context(history, window)))
    off.close()
    stores.drop("sqlite", url)
    return {
        "messages": messages, "window": window, "tool_results": sum(m["role"] == "tool" for m in original),
        "result_bytes": raw_bytes, "largest_result": max(len(m["content"]) for m in original if m["role"] == "tool"),
        "tokens_before": report.tokens_before, "tokens_after": report.tokens_after, "budget": report.budget,
        "strategies": report.strategies, "artifacts_first_sight": stored_after_first,
        "messages_after": report.messages_after,
        "first_sight_s": first, "steady_s": statistics.median(steady_times), "steady_all_s": steady_times,
        "steady_max_s": max(steady_times), "artifacts_per_round": stored,
        "refit_s": statistics.median(refit_times), "history_s": statistics.median(history_times),
        "history_all_s": history_times, "baseline_dumps_s": statistics.median(dumps_times),
        "steady_vs_baseline": statistics.median(steady_times) / statistics.median(dumps_times),
    }


def warm_up(stores: C.Stores) -> None:
    """Imports, the first store's migration, the first put: paid once, before any cell's clock starts."""
    from offload import Offloader

    url = stores.url("sqlite")
    with Offloader(url) as off:
        off.fit_context(conversation(20, 50_000), 6_000)
    stores.drop("sqlite", url)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    rounds = args.rounds or (9 if args.quick else 25)
    max_size = 300_000 if args.quick else SIZES[0]
    cells = []
    started = time.perf_counter()
    with C.Stores(["sqlite"]) as stores:
        warm_up(stores)
        for messages in (100, 400, 1_000):
            for window in WINDOWS:
                cell = measure(stores, messages, window, rounds, max_size)
                cells.append(cell)
                print(f"{messages:>5} messages, {window:>7,} window: first sight {C.fmt_ms(cell['first_sight_s'])} ms, "
                      f"steady {C.fmt_ms(cell['steady_s'])} ms, refit {C.fmt_ms(cell['refit_s'])} ms, "
                      f"history {C.fmt_ms(cell['history_s'])} ms", file=sys.stderr)
    goal = [c for c in cells if c["messages"] == 400]
    verdict = "PASS" if all(c["steady_s"] < GOAL_S for c in goal) else "FAIL"
    rows = [[c["messages"], f"{c['window']:,}", c["tool_results"], f"{c['result_bytes'] / C.MB:.1f} MB",
             f"{c['tokens_before']:,} → {c['tokens_after']:,}", C.fmt_ms(c["first_sight_s"]),
             C.fmt_ms(c["steady_s"]), C.fmt_ms(c["steady_max_s"]), C.fmt_ms(c["refit_s"]), C.fmt_ms(c["history_s"]),
             C.fmt_ms(c["baseline_dumps_s"])] for c in cells]
    print(C.table(["messages", "window", "results", "result bytes", "tokens", "first sight ms", "steady ms",
                   "steady max ms", "refit ms", "history ms", "dumps ms"], rows))
    print(f"\ngoal: steady state under {GOAL_S * 1000:.0f} ms at 400 messages: {verdict}")
    path = C.write_results("context", {"quick": args.quick, "rounds": rounds, "goal_s": GOAL_S, "verdict": verdict,
                                       "cells": cells, "seconds": time.perf_counter() - started})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
