"""fetch_slice latency: a 100-line page at random offsets of 1 MB, 100 MB and 1 GB text artifacts.

    python benchmarks/slicing.py [--quick]

SQLite store in a temporary folder; page budget raised to 20,000 tokens so that every page holds the
100 lines asked for (the default 4,000 holds ~70 of these lines). The artifacts are `grep -rn` output over the stdlib; each is written
to a file and streamed into `Store.put` as 4 MB blocks (so building the 1 GB one never holds it in
memory; its content is a 100 MB base repeated ten times). Rounds go over all artifacts in turn, one
`Offloader.fetch_slice(id, offset=random, limit=100)` each (end to end: metadata, chunk lookup, chunk
read, decode, token budget, extract log write), so noise hits them alike; medians.

Next to it, in the same run, "read everything and split" (the naive way: the whole content, split on
newlines, lines [offset, offset+100)), from the file and from the store (all chunks joined): several
rounds for 1 MB and 100 MB, once for 1 GB.

Goals: the 1 GB median within 3x of the 1 MB one; the peak RSS of a process that only opens the store
and slices the 1 GB artifact under 100 MB (a subprocess, `resource.getrusage().ru_maxrss`; a second
subprocess that opens the store and reads the metadata only gives the floor). Also: the memory and time
of `Offloader.put` on the 100 MB text (it takes the whole result in memory), and items-unit pages
(limit 50) of a 50 MB JSON array, next to reading + parsing (orjson, gc off) the file.

--quick: 1, 10 and 100 MB (the goals are then checked on 100 MB). Results: benchmarks/results/slicing.json.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

C.isolate_env()

LIMIT = 100
# The default page budget (4,000 tokens) holds ~70 of these grep lines; a larger one lets every page
# return the 100 lines asked for (the per-line work, token counting included, is the same).
SLICE_TOKENS = 20_000
BLOCK = 4 << 20
MEMORY_GOAL_MB = 100.0
LATENCY_GOAL = 3.0


# -- child processes (memory measurements) ----------------------------------------------------------

def child_slice(url: str, artifact_id: str, count: int, seed: int, slice_too: bool) -> None:
    """Open the store and slice `count` pages (or only read the metadata); print peak RSS and latencies."""
    started_mb = C.peak_rss_mb()
    from offload import Offloader

    imported_mb = C.peak_rss_mb()
    off = Offloader(url, slice_tokens=SLICE_TOKENS)
    constructed_mb = C.peak_rss_mb()
    info = off.store.content(off.store.get(artifact_id, "")["sha256"])
    opened_mb = C.peak_rss_mb()
    rng = random.Random(seed)
    latencies = []
    if slice_too:
        for i in range(count):
            offset = -LIMIT if i == count - 1 else rng.randrange(0, max(1, info.lines - LIMIT))
            t0 = time.perf_counter()
            page = off.fetch_slice(artifact_id, offset=offset, limit=LIMIT)
            latencies.append(time.perf_counter() - t0)
            assert page["returned"] == LIMIT, page
    print(json.dumps({"peak_rss_mb": C.peak_rss_mb(), "vm_hwm_mb": vm_hwm_mb(), "interpreter_mb": started_mb,
                      "after_import_mb": imported_mb, "after_offloader_mb": constructed_mb,
                      "after_open_mb": opened_mb, "latencies": latencies}))


def child_put(url: str, path: str, tool: str) -> None:
    """Read `path` into memory, then Offloader.put it; print the peak RSS before and during the put."""
    from offload import Offloader

    off = Offloader(url)
    off.store
    data = Path(path).read_bytes()
    before = C.peak_rss_mb()
    t0 = time.perf_counter()
    ref = off.put(data, tool=tool)
    seconds = time.perf_counter() - t0
    print(json.dumps({"bytes": len(data), "peak_before_mb": before, "peak_after_mb": C.peak_rss_mb(),
                      "seconds": seconds, "kind": ref.kind}))


# Linux keeps the high-water RSS of the memory a process replaces at exec (and a forked child starts with a
# copy of its parent's): a child started straight from this big process would report this process's peak
# as its own ru_maxrss. A small launcher in between gives the child a clean figure.
_LAUNCHER = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


def run_child(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _LAUNCHER, sys.executable, __file__, *args],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def vm_hwm_mb() -> float:
    """The kernel's own high-water mark of this process's RSS (cross-check of ru_maxrss)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / C.MB
    return float("nan")


# -- building artifacts -----------------------------------------------------------------------------

def write_text_file(path: Path, size: int, base: Path | None = None) -> None:
    """`size` bytes of grep output to `path`; from `base` repeated when given (for the 1 GB artifact)."""
    with open(path, "wb") as f:
        if base is None:
            for block in C.text_blocks(size, "grep", block=BLOCK):
                f.write(block)
        else:
            written = 0
            while written < size:
                with open(base, "rb") as b:
                    while chunk := b.read(BLOCK):
                        f.write(chunk)
                        written += len(chunk)


def file_blocks(path: Path):
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            yield block


def sha_of(path: Path) -> str:
    digest = hashlib.sha256()
    for block in file_blocks(path):
        digest.update(block)
    return digest.hexdigest()


def store_file(off, path: Path, tool: str = "grep", kind: str = "grep") -> tuple[str, float]:
    """Stream a file into the store as one artifact; returns (artifact id, seconds)."""
    from offload.store import new_id

    sha = sha_of(path)
    row = {"id": new_id("art_"), "namespace": "", "session": None, "tool": tool, "args": None, "kind": kind,
           "content_type": "text/plain", "tokens": 0, "shown_tokens": 0, "reference": None, "meta": None,
           "expires_at": None}
    t0 = time.perf_counter()
    off.store.put(row, file_blocks(path), sha)
    return row["id"], time.perf_counter() - t0


# -- naive baselines --------------------------------------------------------------------------------

def naive_file(path: Path, offset: int) -> str:
    data = path.read_bytes()
    return b"\n".join(data.split(b"\n")[offset:offset + LIMIT]).decode("utf-8", "replace")


def naive_store(off, artifact_id: str, offset: int) -> str:
    data = b"".join(off.iter_raw(artifact_id))
    return b"\n".join(data.split(b"\n")[offset:offset + LIMIT]).decode("utf-8", "replace")


# -- main -------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=31)
    args = ap.parse_args()
    from offload import Offloader

    sizes = ([("1 MB", 1 * C.MB), ("10 MB", 10 * C.MB), ("100 MB", 100 * C.MB)] if args.quick else
             [("1 MB", 1 * C.MB), ("100 MB", 100 * C.MB), ("1 GB", 1000 * C.MB)])
    largest = sizes[-1][0]
    started = time.perf_counter()
    rng = random.Random(7)
    results: dict = {"quick": args.quick, "limit": LIMIT}
    with C.Stores(["sqlite"]) as stores:
        tmp = Path(stores.tmp.name)
        url = stores.url("sqlite")
        off = Offloader(url, slice_tokens=SLICE_TOKENS)
        off.store

        # build
        arts: dict[str, dict] = {}
        base = None
        for label, size in sizes:
            path = tmp / f"text-{label.replace(' ', '')}.txt"
            from_base = base if size > 100 * C.MB and base is not None else None
            write_text_file(path, size, from_base)
            if size == 100 * C.MB:
                base = path
            artifact_id, seconds = store_file(off, path)
            info = off.store.content(off.store.get(artifact_id, "")["sha256"])
            arts[label] = {"path": path, "id": artifact_id, "bytes": info.bytes, "lines": info.lines,
                           "chunks": info.chunk_count, "store_put_s": seconds}
            print(f"  built {label}: {info.bytes:,} bytes, {info.lines:,} lines, {info.chunk_count} chunks, "
                  f"streamed Store.put {seconds:.1f} s ({info.bytes / C.MB / seconds:.0f} MB/s), "
                  f"peak RSS of this process so far {C.peak_rss_mb():.0f} MB", file=sys.stderr, flush=True)

        # fetch_slice latency, interleaved over the artifacts
        for a in arts.values():
            off.fetch_slice(a["id"], offset=0, limit=LIMIT)  # warm: connection, statement cache
        lat: dict[str, list[float]] = {label: [] for label in arts}
        for _ in range(args.rounds):
            for label, a in arts.items():
                offset = rng.randrange(0, a["lines"] - LIMIT)
                t0 = time.perf_counter()
                page = off.fetch_slice(a["id"], offset=offset, limit=LIMIT)
                lat[label].append(time.perf_counter() - t0)
                assert page["returned"] == LIMIT and page["offset"] == offset
        # correctness spot check against the file
        for label, a in arts.items():
            if a["bytes"] <= 100 * C.MB:
                offset = rng.randrange(0, a["lines"] - LIMIT)
                assert off.fetch_slice(a["id"], offset=offset, limit=LIMIT)["content"] == naive_file(a["path"], offset)

        big_id, big_lines = arts[largest]["id"], arts[largest]["lines"]
        offsets = [rng.randrange(0, big_lines - LIMIT) for _ in range(20)]
        profiles = {f"20 line pages of {largest}": C.profile_call(
            lambda: [off.fetch_slice(big_id, offset=o, limit=LIMIT) for o in offsets], interval=0.0005)}

        # naive: read everything and split
        naive: dict[str, dict[str, list[float]]] = {}
        for label, a in arts.items():
            rounds = 5 if a["bytes"] < 500 * C.MB else 1
            times = {"file": [], "store": []}
            for _ in range(rounds):
                offset = rng.randrange(0, a["lines"] - LIMIT)
                for key, fn in (("file", lambda: naive_file(a["path"], offset)),
                                ("store", lambda: naive_store(off, a["id"], offset))):
                    gc.collect()
                    t0 = time.perf_counter()
                    fn()
                    times[key].append(time.perf_counter() - t0)
            naive[label] = times
            gc.collect()
            print(f"  naive {label}: file {C.fmt_ms(C.med(times['file']))} ms, store "
                  f"{C.fmt_ms(C.med(times['store']))} ms", file=sys.stderr, flush=True)

        # memory: a process that only opens the store and slices the largest artifact
        big = arts[largest]
        off.close()
        floor = run_child("--child-slice", url, big["id"], "0", "1", "metadata-only")
        sliced = run_child("--child-slice", url, big["id"], "20", "2", "slice")
        print(f"  child: open+metadata peak {floor['peak_rss_mb']:.0f} MB, open+20 slices peak "
              f"{sliced['peak_rss_mb']:.0f} MB", file=sys.stderr, flush=True)

        # Offloader.put memory and time on the 100 MB text (whole result in memory by design)
        put_text = run_child("--child-put", stores.url("sqlite"), str(arts["100 MB"]["path"]), "grep")
        print(f"  child Offloader.put 100 MB text: {put_text['seconds']:.1f} s, peak "
              f"{put_text['peak_before_mb']:.0f} → {put_text['peak_after_mb']:.0f} MB", file=sys.stderr, flush=True)

        # items: a 50 MB JSON array
        off = Offloader(url, slice_tokens=SLICE_TOKENS)
        data, count = C.json_data(50 * C.MB)
        json_path = tmp / "items.json"
        json_path.write_bytes(data)
        t0 = time.perf_counter()
        ref = off.put(data, tool="api")
        put_json_s = time.perf_counter() - t0
        del data
        gc.collect()
        put_json = run_child("--child-put", stores.url("sqlite"), str(json_path), "api")
        off.fetch_slice(ref.artifact_id, offset=0, limit=50, unit="items")
        item_lat, item_naive = [], []
        for i in range(args.rounds):
            offset = rng.randrange(0, count - 50)
            t0 = time.perf_counter()
            page = off.fetch_slice(ref.artifact_id, offset=offset, limit=50, unit="items")
            item_lat.append(time.perf_counter() - t0)
            assert page["returned"] == 50 and json.loads(page["content"])[0]["id"] == offset + 1, page
            if i < 5:
                import orjson

                def naive_items():
                    gc.disable()
                    try:
                        doc = orjson.loads(json_path.read_bytes())
                    finally:
                        gc.enable()
                    return [orjson.dumps(x).decode() for x in doc[offset:offset + 50]]

                gc.collect()
                t0 = time.perf_counter()
                naive_items()
                item_naive.append(time.perf_counter() - t0)
        item_offsets = [rng.randrange(0, count - 50) for _ in range(10)]
        profiles["10 item pages of the JSON array"] = C.profile_call(
            lambda: [off.fetch_slice(ref.artifact_id, offset=o, limit=50, unit="items") for o in item_offsets],
            interval=0.0005)
        off.close()

    # report
    first = sizes[0][0]
    rows = []
    for label, a in arts.items():
        m = C.med(lat[label])
        nf, ns = C.med(naive[label]["file"]), C.med(naive[label]["store"])
        rows.append([label, a["lines"], a["chunks"], C.fmt_ms(m), C.fmt_ms(sorted(lat[label])[int(0.9 * len(lat[label]))]),
                     f"{m / C.med(lat[first]):.2f}x", C.fmt_ms(nf), C.fmt_ms(ns),
                     f"{nf / m:,.1f}x" + (" (1 run)" if len(naive[label]["file"]) == 1 else "")])
    ratio = C.med(lat[largest]) / C.med(lat[first])
    latency_met = ratio <= LATENCY_GOAL
    memory_met = sliced["peak_rss_mb"] < MEMORY_GOAL_MB
    print(f"\n## fetch_slice, {LIMIT} lines at random offsets (SQLite; medians of {args.rounds})\n")
    print(C.table(["artifact", "lines", "chunks", "fetch_slice ms", "p90 ms", f"÷ {first}",
                   "read file + split ms", "read store + split ms", "file+split ÷ fetch_slice"], rows))
    print(f"\n## Memory (subprocesses on the {largest} artifact) and Offloader.put\n")
    print(C.table(["process", "peak RSS MB"], [
        ["python interpreter started", f"{floor['interpreter_mb']:.0f}"],
        ["+ import offload", f"{floor['after_import_mb']:.0f}"],
        ["+ Offloader(url) constructed", f"{floor['after_offloader_mb']:.0f}"],
        ["+ store opened, artifact metadata read (the floor: no slicing)", f"{floor['peak_rss_mb']:.0f}"],
        [f"open store + 20 fetch_slice pages of {largest}", f"{sliced['peak_rss_mb']:.0f}"],
        ["Offloader.put 100 MB text: peak before → during put",
         f"{put_text['peak_before_mb']:.0f} → {put_text['peak_after_mb']:.0f} "
         f"(+{(put_text['peak_after_mb'] - put_text['peak_before_mb']) / 100:.1f}x the data, {put_text['seconds']:.1f} s)"],
        [f"Offloader.put {put_json['bytes'] / C.MB:.0f} MB JSON: peak before → during put",
         f"{put_json['peak_before_mb']:.0f} → {put_json['peak_after_mb']:.0f} "
         f"(+{(put_json['peak_after_mb'] - put_json['peak_before_mb']) / (put_json['bytes'] / C.MB):.1f}x the data, "
         f"{put_json['seconds']:.1f} s)"],
    ]))
    im, inv = C.med(item_lat), C.med(item_naive)
    print(f"\n## Items: 50-item pages of a {os.path.getsize(json_path) / C.MB if json_path.exists() else 50:.0f} MB "
          f"JSON array ({count:,} objects)\n")
    print(C.table(["operation", "ms"], [
        ["fetch_slice(unit=\"items\", limit=50) at random offsets (median)", C.fmt_ms(im)],
        ["read file + orjson.loads (gc off) + dump 50 items (median of 5)", C.fmt_ms(inv)],
        ["ratio", f"fetch_slice {inv / im:,.0f}x faster"],
        ["Offloader.put of that JSON (indexes the items; once)", C.fmt_ms(put_json_s)],
    ]))
    print("\n## Profiles (pyinstrument): offload functions with the most exclusive time\n")
    print("exclusive = own time + what it calls outside offload (C built-ins, SQLAlchemy, sqlite3) down to the "
          "next offload function.\n")
    prow = []
    for name, prof in profiles.items():
        top = prof.get("top_offload_exclusive", [])[:3]
        prow.append([name, f"{prof['wall_s'] * 1000:,.0f}"] + [f"{r['function']} {r['share']:.0%}" for r in top]
                    + [""] * (3 - len(top)))
    print(C.table(["profile", "ms (profiled)", "1st", "2nd", "3rd"], prow))
    print("\n## Goals\n")
    print(f"- {largest} median within {LATENCY_GOAL:g}x of {first}: {ratio:.2f}x → {'met' if latency_met else 'MISSED'}")
    print(f"- peak RSS slicing {largest} under {MEMORY_GOAL_MB:g} MB: {sliced['peak_rss_mb']:.0f} MB → "
          f"{'met' if memory_met else 'MISSED'} (floor without slicing {floor['peak_rss_mb']:.0f} MB)")
    elapsed = time.perf_counter() - started
    print(f"\n(ran in {elapsed:.0f} s)")
    results.update({
        "artifacts": {k: {kk: (str(vv) if kk == "path" else vv) for kk, vv in v.items()} for k, v in arts.items()},
        "fetch_slice_s": lat, "naive_s": naive, "latency_ratio": ratio, "latency_goal_met": latency_met,
        "memory": {"floor": floor, "slicing": sliced, "put_text_100MB": put_text, "put_json_50MB": put_json},
        "memory_goal_met": memory_met,
        "profiles": profiles,
        "items": {"objects": count, "fetch_slice_s": item_lat, "naive_s": item_naive, "put_s": put_json_s},
        "elapsed_s": elapsed})
    print(f"results: {C.write_results('slicing', results)}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child-slice":
        child_slice(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "slice")
    elif len(sys.argv) > 1 and sys.argv[1] == "--child-put":
        child_put(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        main()
