"""query_artifact on a 50 MB JSON array of objects: cold and warm, next to jq and json.loads + jmespath.

    python benchmarks/query.py [--quick]

The document is an array of ~300k API-like objects (id, a low-cardinality `status`, names, nested owner,
tags), stored with `Offloader.put` in a SQLite store in a temporary folder. Queries:

  filter   jmespath `[?status=='error'].id`       sql `SELECT id FROM artifact WHERE status='error'`
  count    jmespath `length(@)`                     sql `SELECT count(*) FROM artifact`
  first 20 jmespath `[:20]`                         sql `SELECT * FROM artifact LIMIT 20`

cold: the first query in a fresh process (a subprocess; the figure is the query_artifact call alone —
reading the chunks, parsing or loading, running, and storing a derived artifact when the result is over
the budget; the process's start, imports and store opening are shown apart). warm: the same Offloader,
repeated (the parsed document / SQL table is cached). Next to it in the same run: jq (/usr/bin/jq, a
subprocess on the same file, output captured) and json.loads + jmespath.search in this process (file
read included, gc as Python leaves it). Medians. Floor: warm at least 2x faster than jq; goal 10x.

--quick: fewer rounds. Results: benchmarks/results/query.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402

C.isolate_env()

QUERIES = {
    "filter": {"jmespath": "[?status=='error'].id", "sql": "SELECT id FROM artifact WHERE status='error'",
               "jq": '[.[] | select(.status=="error") | .id]'},
    "count": {"jmespath": "length(@)", "sql": "SELECT count(*) FROM artifact", "jq": "length"},
    "first 20": {"jmespath": "[:20]", "sql": "SELECT * FROM artifact LIMIT 20", "jq": ".[:20]"},
}
JQ = shutil.which("jq") or "/usr/bin/jq"
FLOOR, GOAL = 2.0, 10.0


def child(url: str, artifact_id: str, engine: str, expression: str, profile: str = "") -> None:
    t0 = time.perf_counter()
    from offload import Offloader

    imported = time.perf_counter() - t0
    off = Offloader(url)
    off.get(artifact_id)  # opens the store: not part of the query
    opened = time.perf_counter() - t0
    result: dict = {}
    if profile:
        prof = C.profile_call(lambda: result.update(off.query_artifact(artifact_id, **{engine: expression})))
        seconds = prof["wall_s"]
        prof.pop("text", None)  # pyinstrument only
    else:
        t1 = time.perf_counter()
        result = off.query_artifact(artifact_id, **{engine: expression})
        seconds = time.perf_counter() - t1
        prof = None
    print(json.dumps({"query_s": seconds, "import_s": imported, "import_open_s": opened,
                      "derived": "derived_from" in result, "count": result.get("count"), "profile": prof}))


def run_child(url: str, artifact_id: str, engine: str, expression: str, profile: bool = False
              ) -> tuple[dict, float]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", url, artifact_id, engine, expression,
                          "profile" if profile else ""], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    cold_runs, warm_runs, base_runs = (2, 5, 2) if args.quick else (3, 10, 3)
    import jmespath
    import orjson

    from offload import Offloader

    started = time.perf_counter()
    with C.Stores(["sqlite"]) as stores:
        tmp = Path(stores.tmp.name)
        data, count = C.json_data(50 * C.MB)
        path = tmp / "doc.json"
        path.write_bytes(data)
        url = stores.url("sqlite")
        off = Offloader(url)
        t0 = time.perf_counter()
        ref = off.put(data, tool="api")
        put_s = time.perf_counter() - t0
        errors = sum(1 for x in orjson.loads(data) if x["status"] == "error")
        del data
        gc.collect()
        print(f"  document: {path.stat().st_size:,} bytes, {count:,} objects ({errors:,} with status error); "
              f"Offloader.put {put_s:.1f} s", file=sys.stderr, flush=True)
        aid = ref.artifact_id

        cells = []
        profiles: dict[str, dict] = {}
        for name, q in QUERIES.items():
            # jq and json.loads + jmespath.search: baselines in the same run
            jq_t, py_t = [], []
            for _ in range(base_runs):
                t0 = time.perf_counter()
                jq_out = subprocess.run([JQ, "-c", q["jq"], str(path)], capture_output=True, check=True).stdout
                jq_t.append(time.perf_counter() - t0)
                gc.collect()
                t0 = time.perf_counter()
                py_result = jmespath.search(q["jmespath"], json.loads(path.read_bytes()))
                py_t.append(time.perf_counter() - t0)
            assert orjson.loads(jq_out) == py_result
            del py_result
            gc.collect()
            for engine in ("jmespath", "sql"):
                expression = q[engine]
                colds, walls, cold_results = [], [], []
                for _ in range(cold_runs):
                    res, wall = run_child(url, aid, engine, expression)
                    colds.append(res["query_s"])
                    walls.append(wall)
                    cold_results.append(res)
                fresh = Offloader(url)
                first = time.perf_counter()
                out = fresh.query_artifact(aid, **{engine: expression})
                first = time.perf_counter() - first
                warm = []
                for _ in range(warm_runs):
                    t0 = time.perf_counter()
                    out = fresh.query_artifact(aid, **{engine: expression})
                    warm.append(time.perf_counter() - t0)
                if name == "filter" or C.med(jq_t) / C.med(warm) < GOAL:
                    prof = C.profile_call(lambda: fresh.query_artifact(aid, **{engine: expression}))
                    prof.pop("text", None)  # pyinstrument only
                    profiles[f"{name} {engine} warm"] = prof
                    profiles[f"{name} {engine} cold"] = run_child(url, aid, engine, expression, True)[0]["profile"]
                fresh.close()
                derived = "derived_from" in out
                expected = {"filter": errors, "count": 1, "first 20": 20}[name]
                assert out.get("count") == expected, (name, engine, out.get("count"), expected)
                cell = {"query": name, "engine": engine, "expression": expression, "cold_s": C.med(colds),
                        "cold_import_open_s": C.med([r["import_open_s"] for r in cold_results]),
                        "cold_all_s": colds, "cold_process_wall_s": C.med(walls), "first_in_process_s": first,
                        "warm_s": C.med(warm), "warm_all_s": warm, "jq_s": C.med(jq_t), "jq_all_s": jq_t,
                        "json_jmespath_s": C.med(py_t), "json_jmespath_all_s": py_t, "derived": derived,
                        "count": out.get("count"), "expected_count": expected}
                cell["warm_vs_jq"] = cell["jq_s"] / cell["warm_s"]
                cell["cold_vs_jq"] = cell["jq_s"] / cell["cold_s"]
                cells.append(cell)
                print(f"  {name:8} {engine:8} cold {C.fmt_ms(cell['cold_s'])} ms (process "
                      f"{C.fmt_ms(cell['cold_process_wall_s'])} ms), warm {C.fmt_ms(cell['warm_s'])} ms, jq "
                      f"{C.fmt_ms(cell['jq_s'])} ms, json+jmespath {C.fmt_ms(cell['json_jmespath_s'])} ms, "
                      f"{'derived artifact' if derived else 'inline'}", file=sys.stderr, flush=True)
        off.close()

    rows = []
    for c in cells:
        ok = "goal met (≥10x)" if c["warm_vs_jq"] >= GOAL else (
            "floor met (≥2x), goal missed" if c["warm_vs_jq"] >= FLOOR else "FLOOR MISSED (<2x)")
        rows.append([c["query"], c["engine"], f"`{c['expression']}`", "derived" if c["derived"] else "inline",
                     C.fmt_ms(c["cold_s"]), C.fmt_ms(c["cold_process_wall_s"]), C.fmt_ms(c["warm_s"]),
                     C.fmt_ms(c["jq_s"]), C.fmt_ms(c["json_jmespath_s"]), f"{c['warm_vs_jq']:,.1f}x",
                     f"{c['cold_vs_jq']:.2f}x", ok])
    print(f"\n## query_artifact on a 50 MB JSON array ({count:,} objects), medians\n")
    print(C.table(["query", "engine", "expression", "result", "cold ms", "cold process wall ms", "warm ms",
                   "jq ms", "json.loads + jmespath ms", "warm: × faster than jq", "cold: × faster than jq",
                   "warm vs jq (floor 2x, goal 10x)"], rows))
    print("\ncold = the query_artifact call in a fresh process (its start, imports and store opening are in "
          "'process wall'); 'derived' = the result was over the inline budget and was stored as a derived "
          "artifact (part of the time).")
    if profiles:
        print("\n## Profiles (pyinstrument): offload functions with the most exclusive time\n")
        print("exclusive = own time + what it calls outside offload (jmespath, DuckDB, orjson, C built-ins) down to "
              "the next offload function.\n")
        prow = []
        for pname, prof in profiles.items():
            top = (prof or {}).get("top_offload_exclusive", [])[:3]
            prow.append([pname, f"{prof['wall_s'] * 1000:,.0f}" if prof else "–"] +
                        [f"{r['function']} {r['share']:.0%}" for r in top] + [""] * (3 - len(top)))
        print(C.table(["query", "ms (profiled)", "1st", "2nd", "3rd"], prow))
    imp = C.med([c["cold_import_open_s"] for c in cells])
    print(f"\nA fresh process spends {imp * 1000:,.0f} ms (median) importing offload, constructing the Offloader "
          "and opening the store before its first query (not in 'cold ms').")
    elapsed = time.perf_counter() - started
    print(f"\n(ran in {elapsed:.0f} s)")
    out = C.write_results("query", {"quick": args.quick, "objects": count, "errors": errors, "put_s": put_s,
                                    "cells": cells, "profiles": profiles, "floor": FLOOR, "goal": GOAL, "elapsed_s": elapsed})
    print(f"results: {out}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:7])
    else:
        main()
