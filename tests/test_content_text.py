"""Line previews on real outputs: a 5 MB grep of the standard library, a log that ends in a
traceback, a log with errors only in the middle, and a CSV; budgets, exact counts, fast paths."""

from __future__ import annotations

import csv
import json
import io
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import traceback
from collections import Counter
from pathlib import Path

import pytest

from offload.content import build_preview, detect, render_shape

from counting import BUDGETS, COUNTERS, crude, o200k  # noqa: E402,F401
STDLIB = Path(sysconfig.get_paths()["stdlib"])
_MARKER = re.compile(r"… \[([\d,]+) lines? omitted: ([\d,]+)–([\d,]+)(?:;[^\]]*)?\] …")


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _shows(shown: str, line: str) -> bool:
    """`shown` is `line`, or `line` cut by characters with the exact count of what was cut."""
    cut = re.fullmatch(r"(.*)…\[\+([\d,]+) chars\](?:…(.*))?", shown, re.S)
    if not cut:
        return shown == line
    head, hidden, tail = cut.group(1), _number(cut.group(2)), cut.group(3) or ""
    return line.startswith(head) and line.endswith(tail) and len(head) + hidden + len(tail) == len(line)


def _marker(preview_text: str) -> tuple[int, int, int]:
    found = _MARKER.search(preview_text)
    assert found, preview_text
    n, first, last = (_number(group) for group in found.groups())
    assert n == last - first + 1
    return n, first, last


@pytest.fixture(scope="module")
def grep_output() -> bytes:
    """About 5 MB of real `grep -rn "def "` output over the standard library, cut at a line end."""
    if shutil.which("grep"):
        with subprocess.Popen(["grep", "-rn", "--include=*.py", "def ", str(STDLIB)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as grep:
            output = grep.stdout.read(5_200_000)  # the first 5 MB are enough; stop the walk there
            grep.kill()
    else:  # the same lines, produced in Python
        lines = []
        for path in sorted(STDLIB.rglob("*.py")):
            for number, line in enumerate(path.read_text("utf-8", "replace").splitlines(), 1):
                if "def " in line:
                    lines.append(f"{path}:{number}:{line}\n")
        output = "".join(lines).encode()
    assert len(output) > 1_000_000
    while len(output) < 5_000_000:
        output += output
    return output[: output.rindex(b"\n", 0, 5_000_000) + 1]


def _grep_truth(data: bytes) -> Counter:
    return Counter(match.group(1) for line in data.decode("utf-8", "replace").split("\n")
                   if (match := re.match(r"([^:\n]+):\d+:", line)))


@pytest.mark.parametrize("count", COUNTERS)
def test_grep_preview_is_within_budget_with_exact_counts_per_file(grep_output, count):
    found = detect(grep_output)
    assert found.kind == "grep"
    truth = _grep_truth(grep_output)
    lines = grep_output.decode().split("\n")[:-1]
    for budget in BUDGETS:
        preview = build_preview(found, grep_output, budget, count)
        assert count(preview.text) <= budget
        extra = preview.extra
        assert extra["matches"] == sum(truth.values()) and extra["files"] == len(truth)
        assert extra["lines"] == len(lines)
        assert all(truth[path] == n for path, n in extra["matches_per_file"].items())
        assert sorted(extra["matches_per_file"].values(), reverse=True) == \
            sorted(truth.values(), reverse=True)[:20]
        assert sum(extra["matches_per_file"].values()) + extra["other_matches"] == extra["matches"]
        assert extra["other_files"] == len(truth) - len(extra["matches_per_file"])
        n, first, last = _marker(preview.text)
        assert last == len(lines) - 1
        shown = preview.text.split("\n")[:first]
        assert all(_shows(text, lines[index]) for index, text in enumerate(shown))  # whole, or cut exactly
        omitted_bytes = sum(len(line.encode()) + 1 for line in lines[first:])
        assert preview.omitted.startswith(f"lines {first:,}–{last:,} ({n:,} lines, {omitted_bytes:,} bytes) not shown")
        if budget >= 800:
            top_path, top_n = truth.most_common(1)[0]
            common = os.path.commonpath(list(truth)) + "/"
            assert f"{top_n:,}  {top_path[len(common):]}" in preview.text
            assert f"{sum(truth.values()):,} matching lines in {len(truth):,} files under {common}" in preview.text


def test_a_long_line_of_path_characters_is_detected_at_once():
    """`[^\\s:]*[./\\\\][^\\s:]*` tried every dot as the path's separator: a 64 KiB line of dots took 54 s
    to detect, of `a/` 28 s, of backslashes 62 s (quadratic). Run in a process of its own, so that the
    old code fails the test by its time limit instead of holding up the suite."""
    script = (
        "from offload.content import detect\n"
        "for data in (b'.' * 65536, b'a/' * 32768, b'\\\\' * 65536, (b'.' * 20000 + b':') * 3):\n"
        "    for tool in ('read', 'grep'):\n"
        "        print(detect(data, tool=tool).kind)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["text"] * 6 + ["text", "grep"]


def test_grep_lines_are_capped_by_max_lines(grep_output):
    found = detect(grep_output, tool="rg")
    preview = build_preview(found, grep_output, 20_000, o200k, max_lines=50)
    _, first, _ = _marker(preview.text)
    assert first == 50
    assert o200k(preview.text) <= 20_000


def test_grep_counts_stay_exact_for_sorted_output_of_timestamped_lines():
    """`grep -rn ERROR logs | sort` puts line 1002 before 102, so no file's numbers rise; cutting each
    line at its time's `:42:` made every line a file that rises for want of a second line: 1,998 files
    of one match. A timestamp in a file name (`10:12:00.log`) is still read whole when unsorted."""
    sorted_lines = sorted(f"logs/app{n}.log:{i}:2026-12-06 11:{i % 60:02d}:07 ERROR request {i} failed"
                          for n in range(3) for i in range(3, 2001, 3))
    named = [f"logs/2026-12-06T10:{n:02d}:00.log:{i}: ERROR {i}" for n in range(5) for i in range(1, 400, 7)]
    for lines in (sorted_lines, named):
        data = ("\n".join(lines) + "\n").encode()
        preview = build_preview(detect(data, tool="grep"), data, 400, o200k)
        truth = Counter(line.rsplit(":", 2)[0] if line in named else line.split(":", 1)[0] for line in lines)
        assert preview.extra["files"] == len(truth), preview.extra["files"]
        assert dict(preview.extra["matches_per_file"]) == {path: n for path, n in truth.items()
                                                           if path in preview.extra["matches_per_file"]}
        assert preview.extra["matches"] == len(lines)


def test_grep_counts_stay_exact_when_files_take_turns_line_by_line():
    """Output whose files alternate every line (no runs to gallop over) switches to one regular-expression
    pass after the first runs; the counts must be the same as line by line, whatever comes before."""
    grouped = [f"lib/a.py:{i}: grouped {i}" for i in range(700)]
    interleaved = [f"{'C:' if i % 7 == 0 else ''}src/m{i % 13}.py:{i}: x = {i}" for i in range(5000)]
    noise = ["no prefix here", "", "lib/a.py:not-a-number: nope"]
    for lines in (interleaved, grouped + interleaved, interleaved[:40] + noise + interleaved[40:] + grouped):
        data = ("\n".join(lines) + "\n").encode()
        preview = build_preview(detect(data, tool="grep"), data, 400, o200k)
        truth = Counter(match.group(1) for line in lines  # a Windows drive letter belongs to the path
                        if (match := re.match(r"((?:[A-Za-z]:)?[^:\n]+):\d+:", line)))
        assert preview.extra["matches"] == sum(truth.values()) and preview.extra["files"] == len(truth)
        assert all(truth[path] == n for path, n in preview.extra["matches_per_file"].items())


def test_a_path_holding_a_colon_is_counted_whole_in_runs_and_when_files_take_turns():
    """A numbered line's path runs to the first `:digits:` ("src/a:b.py:12:…" is src/a:b.py): its
    matches are neither dropped nor put under "src/a", whether its lines come in a run or take turns."""
    paths = ["src/a:b.py", "src/c.py", "C:\\w\\d:e.txt", "lib/x::y.py"]
    interleaved = [(paths[i % 4], i) for i in range(1, 2000)]
    grouped = [(path, i) for path in paths for i in range(1, 600)]
    for pairs in (interleaved, grouped, grouped + interleaved):
        data = "".join(f"{path}:{n}: value = {n}:{n}:ok\n" for path, n in pairs).encode()
        found = detect(data, tool="grep")
        preview = build_preview(found, data, 400, o200k)
        truth = Counter(path for path, _ in pairs)
        assert preview.extra["matches"] == len(pairs)
        assert preview.extra["matches_per_file"] == dict(truth)


def test_grep_counts_stay_exact_when_a_foreign_line_hides_inside_a_files_run():
    """A run's end is found by probes that skip lines; a line of another file (or of none) between two
    probes must still not be counted for the run's file: the counts are checked against the lines."""
    lines = [f"lib/a.py:{i}: line {i}" for i in range(3000)]
    lines[1001] = "lib/b.py:7: the odd one"
    lines[2002] = "a line that names no file"
    lines += [f"lib/c.py:{i}: after" for i in range(500)]
    for ending in ("\n", ""):
        data = ("\n".join(lines) + ending).encode()
        preview = build_preview(detect(data, tool="grep"), data, 400, o200k)
        assert preview.extra["matches_per_file"] == {"lib/a.py": 2998, "lib/c.py": 500, "lib/b.py": 1}
        assert preview.extra["lines"] == 3500


def test_grep_with_context_lines_counts_only_matches():
    matches = [f"pkg/mod{i % 5}.py:{10 * i}:    raise ValueError('x{i}')" for i in range(300)]
    out = []
    for i, line in enumerate(matches):
        path = f"pkg/mod{i % 5}.py"
        out += [f"{path}-{10 * i - 1}-    if bad:", line, f"{path}-{10 * i + 1}-    return", "--"]
    data = "\n".join(out).encode()
    found = detect(data)
    assert found.kind == "grep"
    preview = build_preview(found, data, 300, o200k)
    assert preview.extra["matches"] == 300 and preview.extra["files"] == 5
    assert set(preview.extra["matches_per_file"].values()) == {60}


def test_lines_priced_together_give_the_preview_they_give_one_by_one(grep_output, log_with_traceback):
    """The estimate prices a preview's candidate lines together; the preview must be the one that
    pricing them one at a time gives (a wrapper of the same count is called once a line)."""
    from offload.tokens import TokenCounter

    counter = TokenCounter()
    for data in (grep_output[:300_000], log_with_traceback):
        found = detect(data)
        for budget in (120, 800, 4000):
            together = build_preview(found, data, budget, counter.count)
            one_by_one = build_preview(found, data, budget, lambda text: counter.count(text))
            assert (together.text, together.omitted) == (one_by_one.text, one_by_one.omitted)


@pytest.mark.parametrize("tool", ["bash", "grep"])
def test_sparse_lines_still_fill_the_head(tool):
    """The head's candidate lines are read for budget * 3 characters first: lines cheaper than that
    (indentation, padding) must still fill the budget, from the longer pool."""
    from offload.tokens import TokenCounter

    count = TokenCounter().count
    if tool == "grep":
        lines = [f"a.py:{i}:" + " " * 120 + "x" for i in range(1, 5000)]
    else:
        lines = [" " * 120 + f"x{i}" for i in range(5000)]
    data = ("\n".join(lines) + "\n").encode()
    found = detect(data, tool=tool)
    budget = 1000
    preview = build_preview(found, data, budget, count)
    shown = [line for line in preview.text.split("\n") if line.rstrip().endswith("x") or line.lstrip().startswith("x")]
    assert count(preview.text) <= budget
    # more lines than budget * 3 characters hold: the longer pool was read
    assert len(shown) * 121 > 3 * budget, len(shown)


@pytest.fixture(scope="module")
def log_with_traceback() -> bytes:
    """A real logging-module log of 40,000 records that ends in a real traceback."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("offload.test.worker")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        for batch in range(20_000):
            logger.info("processed batch %d: %d rows in %d ms", batch, batch * 17 % 1000, batch % 97)
        try:
            {"db": {}}["db"]["password"]
        except KeyError:
            logger.error("run failed\n%s", traceback.format_exc().rstrip())
        stream.write("Process finished with exit code 1\n")
    finally:
        logger.removeHandler(handler)
    return stream.getvalue().encode()


@pytest.mark.parametrize("count", COUNTERS)
def test_the_last_line_stays_whole_when_error_lines_crowd_a_small_budget(count):
    # Found by the suite: a traceback quoting a line that names the error (three error lines to list)
    # left "Process finished with exit code 1" cut to "Process…[+23 chars]…e 1" at 100 tokens.
    lines = [f"2026-12-02 00:44:31,428 INFO offload.test.worker: processed batch {i}: {i * 17 % 1000} rows"
             f" in {i % 97} ms" for i in range(20_000)]
    lines += ["2026-12-02 00:44:31,428 ERROR offload.test.worker: run failed", "Traceback (most recent call last):",
              '  File "/work/main/tests/test_content_text.py", line 168, in log_with_traceback',
              "    except KeyError:", "        ^^^^^^^^^^^^^", "KeyError: 'password'", "Process finished with exit code 1"]
    data = ("\n".join(lines) + "\n").encode()
    for budget in BUDGETS:
        preview = build_preview(detect(data), data, budget, count)
        assert count(preview.text) <= budget
        assert preview.text.endswith("\nProcess finished with exit code 1")
        assert "ERROR offload.test.worker: run failed" in preview.text  # listed, or in the tail itself


@pytest.mark.parametrize("count", COUNTERS)
def test_a_long_last_line_keeps_its_end(count):
    # The content's last line, when longer than a line may be, keeps its end as well as its start:
    # that is where "exit code 1" or a test summary is (found in review: it kept only the start).
    lines = [f"2026-12-02 INFO worker processed batch {i}: {i * 17 % 1000} rows in {i % 97} ms" for i in range(5000)]
    for at in (1000, 2000, 3000, 4000):
        lines.insert(at, f"2026 ERROR worker: batch {at} failed with a long message " + "y" * 120)
    last = "FAILED: " + " ".join(f"test_{i}" for i in range(50)) + " exit code 1"
    data = ("\n".join(lines + [last]) + "\n").encode()
    for budget in (300, 800, 2000):
        preview = build_preview(detect(data), data, budget, count)
        assert count(preview.text) <= budget
        assert preview.text.endswith(" exit code 1") and "\nFAILED: test_0 test_1" in preview.text
        shown = preview.text.rsplit("\n", 1)[1]
        if shown != last:
            assert re.fullmatch(r"FAILED: test_0 .*…\[\+([\d,]+) chars\]….* exit code 1", shown)
            cut = int(re.search(r"…\[\+([\d,]+) chars\]…", shown).group(1).replace(",", ""))
            assert len(shown) - len(f"…[+{cut:,} chars]…") + cut == len(last)  # exact count of what was cut


@pytest.mark.parametrize("count", COUNTERS)
def test_log_ending_in_a_traceback_keeps_the_tail_and_counts_exactly(log_with_traceback, count):
    data = log_with_traceback
    lines = data.decode().split("\n")[:-1]
    found = detect(data)
    assert found.kind == "text"
    for budget in BUDGETS:
        preview = build_preview(found, data, budget, count)
        assert count(preview.text) <= budget
        assert preview.text.endswith("Process finished with exit code 1")
        if budget >= 300:
            assert "KeyError: 'password'" in preview.text and "Traceback (most recent call last):" in preview.text
        n, first, last = _marker(preview.text)
        shown = preview.text.split("\n")
        marker_at = next(i for i, text in enumerate(shown) if text.startswith("… ["))
        assert all(_shows(text, lines[index]) for index, text in enumerate(shown[:marker_at]))
        assert marker_at == first
        # After the marker: lines of the omitted part that report errors ("… 40,000: …"), then the tail.
        tail = [text for text in shown[marker_at + 1:] if not text.startswith("… ")]
        for listed in shown[marker_at + 1:len(shown) - len(tail)]:
            number, text = re.fullmatch(r"… ([\d,]+): (.*)", listed).groups()
            assert first <= _number(number) <= last and lines[_number(number)].startswith(text.split("…[+")[0])
        assert len(tail) == len(lines) - last - 1
        assert all(_shows(text, line) for text, line in zip(tail, lines[last + 1:]))
        omitted_bytes = sum(len(line.encode()) + 1 for line in lines[first:last + 1])
        assert preview.omitted.startswith(f"lines {first:,}–{last:,} ({n:,} lines, {omitted_bytes:,} bytes) not shown")
        assert preview.extra["lines"] == len(lines)


def test_errors_in_the_middle_are_listed_with_their_line_numbers():
    lines = [f"2024-03-01T10:{i // 60 % 60:02d}:{i % 60:02d} INFO request {i} served in {i % 40} ms"
             for i in range(30_000)]
    lines[12_345] = "2024-03-01T13:25:45 ERROR upstream timeout after 30s (request 12345)"
    lines[20_001] = "2024-03-01T15:33:21 WARN retry 3 of request 20001: 0 errors so far"
    lines[25_000] = "psycopg.OperationalError: connection refused"
    data = ("\n".join(lines) + "\n").encode()
    preview = build_preview(detect(data), data, 500, o200k)
    assert preview.extra["error_lines"] == [12_345, 25_000]
    assert "… 12,345: 2024-03-01T13:25:45 ERROR upstream timeout after 30s (request 12345)" in preview.text
    assert "… 25,000: psycopg.OperationalError: connection refused" in preview.text
    assert "(all 2)" in preview.text and "20,001" not in preview.text
    assert o200k(preview.text) <= 500


@pytest.mark.parametrize("budget", [250, 300, 350, 500])
@pytest.mark.parametrize("at", [3, 5, 6, 7, 8, 9, 2_990, 2_995])
def test_every_error_line_the_preview_does_not_show_is_listed_or_the_list_says_first(at, budget):
    """The head gave way to the list of error lines after they were searched for: an error on a line it
    then left out (7) went unlisted beside "(all 3)"; an error near the end, the same with the tail."""
    lines = [f"2024-01-01 12:00:00 INFO request {i} handled ok" for i in range(3000)]
    lines[at] = f"2024-01-01 12:00:00 ERROR early failure at step {at}"
    for k in (1000, 1500, 2000):
        lines[k] = f"2024-01-01 12:00:00 ERROR middle failure {k}: " + "detail " * 25
    data = ("\n".join(lines) + "\n").encode()
    preview = build_preview(detect(data), data, budget, o200k)
    first, last, which = re.search(r"omitted: ([\d,]+)–([\d,]+); lines among them that report errors "
                                   r"\((all|first) \d+[;)]", preview.text).groups()
    hidden = range(int(first.replace(",", "")), int(last.replace(",", "")) + 1)
    listed = preview.extra["error_lines"]
    errors = [n for n in hidden if "ERROR" in lines[n]]
    assert listed == (errors if which == "all" else errors[:len(listed)]), (listed, errors, which)
    assert at in listed or at not in hidden or which == "first"
    assert o200k(preview.text) <= budget


def test_an_error_list_cut_at_its_first_lines_gives_a_grep_for_more(sqlite_url):
    """"first 5" of 2,857 error lines said nothing of how many there were or how to find the rest: the
    next calls offered grep="regex". They now name the words the listed lines were errors by, and that
    grep finds every error line (its count exact)."""
    from offload import Offloader

    lines = []
    for i in range(20_000):
        lines.append(f"2026-12-08 10:{i % 60:02d}:00 INFO request {i} ok path=/api/v1/items/{i}")
        if i % 7 == 3:
            lines.append(f"2026-12-08 10:{i % 60:02d}:00 ERROR upstream timeout for request {i}")
        if i % 1000 == 5:
            lines.append(f"ValueError: bad input {i}")
        if i % 500 == 9:  # words in names: no error lines, and the grep's word bounds pass them over
            lines.append(f"eth0: rx_errors=0 tx_errors=0 on-error=retry libgpg-error.so.0 ErrorBoundary {i}")
    errors = [n for n, line in enumerate(lines) if " ERROR " in line or "ValueError" in line]
    with Offloader(sqlite_url) as off:
        ref = off.process("read", "\n".join(lines))
        assert "report errors (first " in str(ref) and "; grep below for more):" in str(ref)
        pattern = json.loads(re.search(r'grep=("[^"]+"), context=2\) extracts', str(ref)).group(1))
        assert pattern == r"\bERROR\b|Error\b"  # words of their own, a class name's ending
        found = off.query_artifact(ref.artifact_id, grep=pattern, limit=1_000)
        assert found["count"] == len(errors) == 2_877
        listed = [int(n.replace(",", "")) for n in re.findall(r"^… ([\d,]+): ", str(ref), re.M)]
        assert listed and set(listed) <= set(errors)
        # a list that is whole names no words: there is nothing left to find
        clean = [line for line in lines if "ERROR" not in line and "Error" not in line]
        whole = str(off.process("read", "\n".join(clean[:3000] + ["ERROR: one"] + clean[3000:6000])))
        assert "report errors (all 1):" in whole and 'grep="regex", context=2' in whole


def test_names_and_options_holding_error_words_are_not_error_lines_nor_crowd_out_those_that_are():
    """A kernel log's `errors=remount-ro` and `rx_errors=0` (15,000 of them) were three of its five error
    lines, and then, as candidates that are no errors, used up the search before its segfault and I/O
    errors; `panic=1`, rustdoc's `macro.panic!.html` and rustc's `help: … and panic if …` are none."""
    from offload.content.errorlines import error_lines

    lines = []
    for i in range(30_000):
        lines.append(f"[{i:8d}.120435] e1000e: rx_errors=0 tx_errors=0" if i % 2 else
                     f"[{i:8d}.480287] EXT4-fs (sda1): re-mounted. Opts: errors=remount-ro")
    lines[3] = "[       3.0] Command line: BOOT_IMAGE=/vmlinuz panic=1 quiet"
    lines[5] = "/usr/share/doc/rust/html/std/macro.panic!.html"
    lines[7] = "  = help: you can convert a `usize` to a `u32` and panic if the converted value doesn't fit"
    lines[25_001] = "[ 5004.302312] python3[9182]: segfault at 0 ip 00007f1c2a4b1e2d error 4 in libc.so.6"
    lines[29_002] = "[ 6571.622413] Buffer I/O error on dev sda1, logical block 15432, async page read"
    data = ("\n".join(lines) + "\n").encode()
    found, complete = error_lines(data, (0, len(data)), (0, len(lines) - 1), 5)
    assert [number for number, _ in found] == [25_001, 29_002] and complete
    preview = build_preview(detect(data), data, 800, o200k)
    assert preview.extra["error_lines"] == [25_001, 29_002] and "(all 2)" in preview.text


@pytest.mark.parametrize("word", ["error", "errors", "Error", "ERROR", "failed", "failure", "fails", "fatal",
                                  "panic", "panicked", "exception", "Exceptions", "traceback"])
def test_the_test_by_a_keywords_neighbours_never_rejects_what_the_search_takes(word):
    """`_stands_alone` skips a keyword by the bytes beside it before its line is decoded and searched;
    it must take every one the search (`_ERROR_LINE`) would."""
    from offload.content.errorlines import _ERROR_LINE, _stands_alone

    befores = ["", " ", "x", "X", "e", "_", "/", ".", "-", "=", ":", "[", "(", "'", "1", "é", "Value", "IO", "\t"]
    afters = ["", " ", ":", "=", ".", ".x", "!.html", "!", "s", "ing", "_", "-", "/", "1", ",", ")", "é", "\r"]
    for before in befores:
        for after in afters:
            line = f"{before}{word}{after} tail"
            data = line.encode()
            lowered = data.lower()
            hit = lowered.find(word.lower().encode(), len(before.encode()))
            key = next(w for w in (b"error", b"exception", b"traceback", b"fatal", b"panic", b"fail")
                       if lowered.startswith(w, hit))
            if _ERROR_LINE.search(line):
                assert _stands_alone(data, 0, lowered, hit, len(key)), line


@pytest.mark.parametrize("budget", [60, 80, 100, 150, 250, 400])
def test_a_line_is_cut_to_a_useful_part_or_not_shown(budget):
    """A derived grep's last line came back as `6812: big.c…[+66 chars]…type]`, 11 of its 77 characters,
    which say nothing of it; a cut line keeps at least 32 characters, or a third of it."""
    lines = [f"{i}: big.c:{i}:9: warning: suggest parentheses around assignment used as truth value [-Wparens]"
             for i in range(0, 8_000, 5)]
    data = ("\n".join(lines) + "\n").encode()
    preview = build_preview(detect(data), data, budget, o200k)
    assert o200k(preview.text) <= budget
    for shown in preview.text.split("\n"):
        cut = re.fullmatch(r"(.*)…\[\+([\d,]+) chars\](?:…(.*))?", shown)
        if cut:
            kept = len(cut.group(1)) + len(cut.group(3) or "")
            assert kept >= 32 or 3 * kept >= kept + _number(cut.group(2)), shown


def test_exceptions_named_with_capitals_are_error_lines():
    """`java.io.IOException`, `OSError`, `SSLError`: a capital before Error or Exception, where the search
    wanted a lowercase letter (`ValueError`), so `Caused by: java.io.IOException: disk gone` went unlisted."""
    lines = [f"2024-03-01 10:00:{i % 60:02d} INFO request {i} served" for i in range(20_000)]
    lines[5_000] = "Caused by: java.io.IOException: disk gone"
    lines[9_000] = "OSError: [Errno 28] No space left on device"
    lines[12_000] = "ssl.SSLError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"
    data = ("\n".join(lines) + "\n").encode()
    preview = build_preview(detect(data), data, 800, o200k)
    assert preview.extra["error_lines"] == [5_000, 9_000, 12_000] and "(all 3)" in preview.text
    # npm says ERR!, and its grep takes no word bound after the `!`
    npm = [f"npm http fetch GET 200 https://registry.npmjs.org/pkg{i} 12ms" for i in range(5_000)]
    for i in range(3_000, 3_012):
        npm[i] = f"npm ERR! peer dep conflict {i}"
    data = ("\n".join(npm) + "\n").encode()
    preview = build_preview(detect(data), data, 600, o200k)
    assert preview.extra["error_lines"][:2] == [3_000, 3_001] and preview.extra["error_grep"] == r"\bERR!"
    assert sum(bool(re.search(preview.extra["error_grep"], line)) for line in npm) == 12


def test_coloured_error_lines_are_found_and_file_names_are_not_errors():
    """`\x1b[31mERROR` held no word for `\\b` to find (the `m` of the colour code), so a coloured error in
    the middle of a build log went unlisted; `libgpg-error.so` in `ls -la` output was listed as one."""
    esc = "\x1b"
    lines = [f"{esc}[32m✓{esc}[0m compiled m{i}.ts" for i in range(2000)]
    lines[1200] = f"{esc}[31mERROR{esc}[0m in src/app.ts:12:5"
    lines[1500] = f"{esc}[1m{esc}[31merror[E0308]{esc}[0m: mismatched types"
    lines[1700] = f"{esc}[31mFAILED{esc}[0m tests/test_app.py::test_x - assert 1 == 2"
    data = ("\n".join(lines) + "\n").encode()
    preview = build_preview(detect(data), data, 800, o200k)
    assert preview.extra["error_lines"] == [1200, 1500, 1700] and "(all 3)" in preview.text
    listing = [f"-rw-r--r-- 1 root root {i} Jan  1 lib{name}.so.0" for i, name in
               enumerate(["gpg-error", "foo-errors", "x_error", "error-prone"] * 800)]
    data = ("\n".join(listing) + "\n").encode()
    assert "error_lines" not in build_preview(detect(data), data, 800, o200k).extra
    plain = "\n".join(f"step {i} ok" for i in range(3000)) + "\nbuild error.\nERROR: x failed (exit code 2)\n"
    plain = plain.encode()
    assert build_preview(detect(plain), plain, 800, o200k).text.endswith("ERROR: x failed (exit code 2)")


def test_a_csv_preview_never_splits_a_record_whose_quoted_field_spans_lines():
    """The head had ended in `15,name15,"multi` and the tail begun with `line, comment 2999",4498.5`:
    a row missing its first fields, to a reader."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "name", "comment", "score"])
    for i in range(3000):
        writer.writerow([i, f"name{i}", f"multi\nline, comment {i}", i * 1.5])
    data = out.getvalue().encode()
    for budget in (300, 500, 800, 1200):
        preview = build_preview(detect(data), data, budget, o200k)
        head, _, tail = preview.text.partition("\n… [")
        assert head.count('"') % 2 == 0 and tail.count('"') % 2 == 0, (budget, preview.text)
        rows = list(csv.reader(io.StringIO(head)))
        assert rows[0] == ["id", "name", "comment", "score"] and all(len(row) == 4 for row in rows), budget
        assert o200k(preview.text) <= budget


def test_a_log_that_does_not_end_badly_shows_a_short_tail():
    lines = [f"copying file {i} of 50000" for i in range(50_000)]
    data = "\n".join(lines).encode()
    preview = build_preview(detect(data), data, 800, o200k)
    _, first, last = _marker(preview.text)
    assert last >= len(lines) - 6 and first > 40
    assert preview.text.endswith("copying file 49999 of 50000")


@pytest.fixture(scope="module")
def stdlib_csv() -> bytes:
    """Facts about real standard-library files, with a quoted field holding a comma and a newline."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["path", "bytes", "lines", "is_test", "ratio", "modified", "note"])
    for index, path in enumerate(sorted(STDLIB.glob("**/*.py"))[:6000]):
        size = path.stat().st_size
        note = "has, a comma\nand a newline" if index % 500 == 7 else ("" if index % 3 else "reviewed")
        writer.writerow([path.relative_to(STDLIB), size, size // 40, "test" in path.name,
                         round(size / 1000, 3), f"2024-01-{index % 28 + 1:02d}", note])
    return out.getvalue().encode()


@pytest.mark.parametrize("count", COUNTERS)
def test_csv_preview_has_exact_rows_types_and_nulls(stdlib_csv, count):
    found = detect(stdlib_csv)
    assert (found.kind, found.delimiter) == ("csv", ",")
    rows = list(csv.reader(io.StringIO(stdlib_csv.decode())))
    for budget in BUDGETS:
        preview = build_preview(found, stdlib_csv, budget, count)
        assert count(preview.text) <= budget
        assert preview.extra["rows"] == len(rows) - 1
        assert preview.text.startswith("path,bytes,lines,is_test,ratio,modified,note")
    types = preview.extra["types"]
    assert types == {"path": "string", "bytes": "integer", "lines": "integer", "is_test": "bool",
                     "ratio": "float", "modified": "date", "note": "string"}
    assert preview.shape["columns"]["note"]["nulls"] == sum(1 for row in rows[1:] if row[6] == "")  # every row
    assert "sampled" not in preview.shape  # under 1 MiB: types and nulls over every row
    rendered = render_shape(preview.shape)
    assert f"table: {len(rows) - 1:,} rows × 7 columns" in rendered and "bytes: integer" in rendered


def test_tsv_without_quotes_counts_rows_past_blank_lines():
    data = b"a\tb\n" + b"".join(b"%d\tx%d\n" % (i, i) for i in range(5000)) + b"\n\n" + b"5000\ty\n"
    preview = build_preview(detect(data), data, 200, o200k)
    assert preview.extra["rows"] == 5001 and preview.extra["delimiter"] == "\t"


@pytest.mark.parametrize("megabytes", [pytest.param(20), pytest.param(100, marks=pytest.mark.slow)])
def test_big_text_and_grep_previews_count_exactly(grep_output, megabytes):
    # how fast: benchmarks/ingest.py, as a ratio against a file write of the same bytes
    line = b"2024-01-01 12:00:00 INFO worker-3 processed batch 1234567 in 87 ms\n"
    text = line * (megabytes * 1_000_000 // len(line))
    preview = build_preview(detect(text), text, 2000, o200k)
    assert preview.extra["lines"] == len(text) // len(line)
    grep = grep_output * (megabytes // 5)
    grep_preview = build_preview(detect(grep), grep, 2000, o200k)
    assert grep_preview.extra["matches"] == sum(_grep_truth(grep_output).values()) * (megabytes // 5)
    truth = _grep_truth(grep_output)
    assert grep_preview.extra["files"] == len(truth) and grep_preview.extra["matches_per_file"]
    assert all(n == truth[path] * (megabytes // 5) for path, n in grep_preview.extra["matches_per_file"].items())


def test_file_and_path_names_are_not_error_lines():
    """`ls -laR` listed `AppIdentityException.php` as an error line, and `find` the path `…/std/io/error`:
    a word of the error search inside a file's or a path's name."""
    names = ["AppIdentityException.php", "LogException.php", "std/io/error", "src/errors/mod.rs", "x/fatal/y"]
    data = ("\n".join(f"/usr/lib/pkg{i}/{names[i % 5]}" for i in range(4000)) + "\n").encode()
    assert "error_lines" not in build_preview(detect(data), data, 800, o200k).extra
    real = data.replace(b"/usr/lib/pkg2002/std/io/error", b"find: '/proc/1/fd': Permission denied error")
    assert build_preview(detect(real), real, 800, o200k).extra["error_lines"] == [2002]


@pytest.mark.parametrize("budget", [300, 400, 800])
def test_the_error_list_keeps_to_its_share_and_leaves_the_head_and_tail(budget):
    """The list of error lines took what it needed: `git log --stat`, whose commit messages say "error"
    and "failed", showed five of them and no tail, and at 300-400 tokens no line of the text at all. Past
    its first line it takes a third of the budget at most."""
    lines = [f"commit {i:040x}" if i % 10 == 0 else f"    fix: the error {i} failed when " + "words " * 30
             for i in range(4000)]
    data = ("\n".join(lines) + "\n").encode()
    text = build_preview(detect(data), data, budget, o200k).text
    assert text.startswith(lines[0] + "\n" + lines[1][:30]) and "    fix: the error 3999 failed" in text, text
    listed = [line for line in text.splitlines() if line.startswith("… ") and not line.startswith("… [")]
    assert len(listed) == 1 or o200k("\n".join(listed)) <= budget // 3


def test_error_lines_past_the_first_scan_chunk_keep_exact_numbers():
    lines = [f"{i:08d} INFO copied block {i} to the replica without incident" for i in range(400_000)]
    for number in (150_123, 250_000, 399_000):
        lines[number] = f"{number:08d} FATAL replica {number} rejected the block: checksum mismatch"
    data = ("\n".join(lines) + "\n").encode()
    assert len(data) > 20_000_000
    preview = build_preview(detect(data), data, 400, o200k)
    assert preview.extra["error_lines"] == [150_123, 250_000, 399_000]
    for number in (150_123, 250_000, 399_000):
        assert f"… {number:,}: {lines[number]}" in preview.text


@pytest.mark.parametrize("budget", [0, 5, 20, 40])
def test_tiny_budgets_are_still_respected(grep_output, log_with_traceback, stdlib_csv, budget):
    for data in (grep_output, log_with_traceback, stdlib_csv, b'{"a": [' + b"1," * 10_000 + b"2]}"):
        preview = build_preview(detect(data), data, budget, o200k)
        assert o200k(preview.text) <= budget
        assert preview.truncated


def test_the_last_resort_cut_keeps_whole_lines_when_it_can():
    """A skeleton too big for its budget was cut mid-marker (`…[+`); a preview's cut now ends at a line's
    end when that keeps a third of what fits, and only a text with no such line is cut by characters.
    Slice pages still take the longest prefix (the next page starts where one ends)."""
    from offload.content.lines import clip_to_budget

    skeleton = '{\n  "data": {\n    "items": [\n      … [20,000 items omitted: data.items[0:20000]] …\n    ]\n  }\n}'
    cut = clip_to_budget(skeleton, 20, o200k, whole_lines=True)
    assert o200k(cut) <= 20 and cut == '{\n  "data": {\n    "items": ['
    longest = clip_to_budget(skeleton, 20, o200k)
    assert skeleton.startswith(longest) and len(longest) > len(cut) and o200k(skeleton[:len(longest) + 1]) > 20
    assert clip_to_budget(skeleton, 1_000, o200k, whole_lines=True) == skeleton
    one_line = "word " * 200
    cut = clip_to_budget(one_line, 20, o200k, whole_lines=True)
    assert one_line.startswith(cut) and 0 < o200k(cut) <= 20 and o200k(cut + "word ") > 20


def test_shell_kind_from_the_caller_gets_the_text_preview(log_with_traceback):
    found = detect(log_with_traceback)
    found.kind = "shell"
    preview = build_preview(found, log_with_traceback, 300, o200k)
    assert preview.text.endswith("Process finished with exit code 1") and o200k(preview.text) <= 300


def test_tail_matters_in_parts_finds_what_the_whole_expression_finds():
    """`tail_matters` searches ASCII tails part by part; it must agree with `_TAIL_MATTERS` itself on
    endings of every sort, on source code (brackets, "result", "test" in every other line) and on
    windows of 20 lines of real stdlib files, with the keywords in any case."""
    from offload.content.lines import _TAIL_MATTERS, tail_matters

    endings = ["FAILED tests/test_x.py::test_y - AssertionError", "Traceback (most recent call last):",
               "make: *** [all] Error 2", "Process exited with code 1", "3 passed, 1 skipped in 0.2s",
               "  Total: 12", "results = 5", "BUILD SUCCESSFUL in 3s", "  },", "]", "ValueError: bad",
               "EXIT STATUS 2", "Segmentation Fault (core dumped)", "killed", "panicked at src/main.rs",
               "no errors here", "errorless", "exitcode", "result", "done.", "Done: 3", "10 tests", "x]"]
    texts = [*endings, *(f"line one\n{e}\nline three" for e in endings)]
    found = 0
    for path in sorted(STDLIB.glob("*.py"))[:60]:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        texts += ["\n".join(lines[at:at + 20]) for at in range(0, len(lines), 37)]
    for text in texts:
        expected = _TAIL_MATTERS.search(text) is not None
        found += expected
        assert tail_matters(text) == expected, text
        assert tail_matters(text.upper()) == (_TAIL_MATTERS.search(text.upper()) is not None), text
    assert 100 < found < len(texts) - 100  # both answers are well represented
    assert tail_matters("Ошибка\nTraceback (most recent call last):")  # non-ASCII: the whole expression
