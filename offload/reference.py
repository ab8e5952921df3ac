"""The Reference: what the model sees in place of an oversized result.

Its text says what was stored, the exact sizes (estimates labelled as such), a preview that keeps what
matters, whether anything was left out, and the exact next calls. Its dict form is the same facts for
structured tool results and the API. A reference for a result that could NOT be stored says so plainly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from .utf8 import carriable

KIND_LABELS = {
    "json": "JSON document", "ndjson": "NDJSON rows", "csv": "CSV table", "grep": "grep output",
    "shell": "shell output", "text": "text", "binary": "binary data",
}


# The structured form's fields that DESIGN.md promises (present in every to_dict(), null when not applicable).
CONTRACT_FIELDS = ("artifact_id", "tool", "kind", "content_type", "bytes", "chars", "lines", "items", "tokens",
                   "sha256", "preview", "shape", "hints", "truncated")


# What gives way, in order, when the structured form must fit a budget (`fitted_dict`): details the text
# form states in its own words (per-file counts, hint results, notes), then what it shows within its
# budget (the shape, the hints, the stderr preview, the preview).
# Within the smallest budgets (a limit of 200-300 tokens), the contract's other fields alone come near it:
# then the flags the text states, and the sha256 (~48 tokens; the text shows it only for binary data).
_GIVES_WAY = ("extra", "hint_results", "notes", "note", "omitted", "shape", "hints", "shell_fields", "stderr",
              "preview", "stderr_bytes", "stderr_truncated", "sha256")
_EMPTIED: dict[str, Any] = {"shape": None, "hints": [], "preview": "", "sha256": ""}
_TOOL_SHOWN = 40  # UTF-8 bytes of a tool name the short wording shows (40 ASCII characters, 20 "é", 13 "工")
_ERROR_SHOWN = 120  # and of why a result was not stored


def _shortened(text: str, size: int) -> str:
    """`text` if its UTF-8 takes at most `size` bytes, else its longest prefix that takes fewer, and "…"
    (tokens follow bytes more closely than characters: a name in "é" or "工" costs a token a letter)."""
    encoded = text.encode("utf-8", "surrogatepass")
    return text if len(encoded) <= size else encoded[:size - 1].decode("utf-8", "ignore") + "…"


def _measure_compact(measure: Callable[[str], int], data: dict[str, Any]) -> int:
    """Tokens of `data` as it is sent: compact JSON, as orjson and the MCP SDK write it (", " and ": "
    cost ~40 tokens more on a shell reference)."""
    return measure(json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":")))


def _cut_preview(data: dict[str, Any], measure: Callable[[str], int], budget: int) -> bool:
    """Cut `data["preview"]` to the most lines, from both ends (a log's error is at its end), with which
    `data` fits `budget`, marked where they were cut; False (unchanged) when not even one line fits."""
    lines = data["preview"].split("\n")

    def cut(kept: int) -> str:
        head, tail = lines[:(kept + 1) // 2], lines[len(lines) - kept // 2:] if kept // 2 else []
        return "\n".join(head + [f"… [{len(lines) - kept:,} lines of the preview cut here to fit this form; "
                                 "the text form has them] …"] + tail)

    whole = data["preview"]
    fits, over = 0, len(lines)
    while over - fits > 1:  # the most lines that fit lie in [fits, over)
        middle = (fits + over) // 2
        data["preview"] = cut(middle)
        if _measure_compact(measure, data) <= budget:
            fits = middle
        else:
            over = middle
    if not fits:
        data["preview"] = whole
        return False
    data["preview"], data["truncated"] = cut(fits), True
    return True


def _n(value: int | None) -> str:
    return f"{value:,}" if value is not None else "?"


def _of(value: int | None, noun: str) -> str:
    """`1 byte`, `2 bytes`: a count and its noun."""
    return f"{_n(value)} {noun}{'' if value == 1 else 's'}"


@dataclass
class Reference:
    artifact_id: str | None
    tool: str
    kind: str
    content_type: str
    bytes: int
    chars: int
    lines: int
    items: int | None
    tokens: int
    sha256: str
    preview: str
    truncated: bool
    shape: dict | None = None
    shape_text: str = ""
    hints: list[dict[str, Any]] = field(default_factory=list)  # {"jmespath": e, "result": summary}
    omitted: str = ""
    notes: list[str] = field(default_factory=list)
    stored: bool = True
    error: str | None = None  # why it was not stored
    exit_code: int | None = None
    shell_fields: dict[str, Any] | None = None  # a shell dict's other keys, whole (results.SHELL_FIELDS_BYTES)
    stream: str | None = None  # what a shell dict called its stdout, when not `stdout` ("output")
    stderr: str | None = None  # stderr preview (shell)
    stderr_bytes: int | None = None
    stderr_artifact_id: str | None = None
    stderr_truncated: bool = False
    items_path: str | None = None
    same_as: str | None = None  # an earlier artifact with the same result
    tokens_exact: bool = False
    tokens_sampled: bool = False  # estimated from a sample of a large result (see tokens.estimate_sampled)
    extra: dict[str, Any] = field(default_factory=dict)
    # the short wording, for a budget the full one does not fit (~250 tokens and below): the same facts
    # and calls, fewer words (`ReferenceBuilder.clip`)
    terse: bool = False
    within_limit: bool = False  # stored though its tool's limit passes it through (`offload put`): not "too large"
    stderr_grep: str | None = None  # the words of the error lines stderr's preview lists the first of

    # -- structured form --------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The structured form. Its nested values (shape, extra, notes) are the reference's own, not
        copies (`dataclasses.asdict` deep-copied the shape on every stored result: ~1 ms); it is for
        serialising, not for changing."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["hints"] = [h["jmespath"] for h in self.hints]
        data["hint_results"] = {h["jmespath"]: h.get("result") for h in self.hints}
        data["tokens_estimated"] = not self.tokens_exact
        data.pop("tokens_exact")
        data.pop("shape_text")
        data.pop("terse")
        data.pop("within_limit")
        data.pop("stderr_grep")
        # the contract's fields are always there (null or [] when they do not apply), so scripts can
        # rely on the keys; the optional extras appear only when they say something
        return {k: v for k, v in data.items() if k in CONTRACT_FIELDS or (v is not None and v != [] and v != {})}

    def fitted_dict(self, measure: Callable[[str], int], budget: int, /, **more: Any) -> dict[str, Any]:
        """`to_dict()` with `more` merged, within `budget` tokens as `measure` counts its JSON: the form a
        model may read instead of the text (MCP structuredContent, a function call's output).

        The text form fits its budget; the dict holds more (the shape as a dict, every file's match count,
        each hint's result) and can take twice the text's tokens. Over the budget, members give way in
        the order of _GIVES_WAY, each one named in `left_out`, with where to find it: nothing is cut
        without saying so. The contract's fields stay, emptied (null, [] or "").
        """
        data = {**self.to_dict(), **more}
        left_out: list[str] = []
        note = {"fields": left_out, "why": f"to fit {budget:,} tokens; the text form states them, "
                                          "`offload show ID --json` has every field"}
        for name in (None, *_GIVES_WAY):
            if name is not None:
                if data.get(name) in (None, "", [], {}):
                    continue
                if name == "preview" and _cut_preview(data, measure, budget):
                    # cut by lines, not dropped: escapes (an ESC is six characters in JSON) made a
                    # coloured log's preview over where its text fitted, and the form showed none of it
                    left_out.append("preview (cut)")
                    data["left_out"] = note
                    return data
                if name in CONTRACT_FIELDS:
                    data[name] = _EMPTIED[name]
                else:
                    del data[name]
                left_out.append(name)
                data["truncated"] = data["truncated"] or name == "preview"
                data["left_out"] = note
            if _measure_compact(measure, data) <= budget:
                return data
        # last, as the short wording of the text does: why it was not stored, then a long tool name, cut
        for name, keep in (("error", _ERROR_SHOWN), ("tool", _TOOL_SHOWN)):
            value = data.get(name)
            if isinstance(value, str) and _shortened(value, keep) != value:
                data[name] = _shortened(value, keep)
                left_out.append(f"{name} (cut)")
                data["left_out"] = note
                if _measure_compact(measure, data) <= budget:
                    break
        return data

    @property
    def entries(self) -> bool:
        """Whether the items are the entries of NUL-separated text (`find -print0`), not JSON values."""
        return "nul_separated_entries" in self.extra

    def __str__(self) -> str:
        return self.render()

    # -- text form --------------------------------------------------------------------------

    def render(self) -> str:
        # a key or value of the shape may hold a lone surrogate (a JSON escape): shown as that escape
        return carriable("\n".join(part for part in (self.header(), self.body(), self.footer()) if part))

    def header(self) -> str:
        label = KIND_LABELS.get(self.kind, self.kind)
        if self.tokens_sampled:
            tokens = f"about {_n(self.tokens)} tokens (estimated from a sample)"
        else:
            tokens = _of(self.tokens, "token") + ("" if self.tokens_exact else " (estimate)")
        if self.kind == "binary":
            size = f"{_of(self.bytes, 'byte')}, {self.content_type}, sha256 {self.sha256[:16]}…"
        else:
            size = f"{_of(self.bytes, 'byte')}, {_of(self.lines, 'line')}, {_of(self.chars, 'char')}"
            if self.items is not None:
                size += f", {_n(self.items)} {'entries' if self.entries else 'items'}" + (
                    f" at `{self.items_path}`" if self.items_path else "")
            size += f", {tokens}"
        if self._stderr_only():
            size = f"stdout empty; stderr {_of(self.stderr_bytes or 0, 'byte')}, below"
        tool = _shortened(self.tool, _TOOL_SHOWN)
        if self.terse and self.stored:
            lines = [f"[offload] `{tool}` result stored whole as {self.artifact_id} ({label}: {size})."]
        elif self.terse:
            error = _shortened(self.error or "", _ERROR_SHOWN)
            lines = [f"[offload] `{tool}` result ({label}: {size}) could NOT be stored ({error}). Only the preview "
                     "below reaches you; the rest is not retrievable."]
        elif not self.stored:
            lines = [f"[offload] The result of {self._named()} was too large for the context ({label}: {size}) and "
                     f"could NOT be stored ({self.error}). Only the preview below reaches you; the rest is not "
                     "retrievable. Re-run the tool with narrower arguments if you need more."]
        else:  # `put` stores what fits too: only a result bigger than the preview that could not hold it
            too_large = not self.within_limit and (
                self.stderr_truncated if self._stderr_only()
                else self.truncated and self.bytes > len(self.preview.encode("utf-8", "surrogatepass")))
            why = " was too large for the context and" if too_large else ""
            lines = [f"[offload] The result of {self._named()}{why} was stored whole as {self.artifact_id} "
                     f"({label}: {size})."]
        if self.same_as and self.stored:
            lines.append(f"Same result as {self.same_as} (an earlier identical call): query that one instead of "
                         "re-running the tool.")
        if self.exit_code is not None:
            lines.append(f"Exit code: {self.exit_code}.")
        if self.shell_fields:
            lines.append("Its other fields: " + json.dumps(self.shell_fields, ensure_ascii=False, default=str,
                                                           separators=(",", ":")))
        lines.extend(f"Note: {note}" for note in self.notes if not (self._stderr_only() and note == EMPTY_NOTE))
        return "\n".join(lines)

    def _stderr_only(self) -> bool:
        """A shell result with nothing on stdout and a stderr: its sizes, "empty result" and "[empty: 0
        bytes]" were stdout's, and read as the whole result's beside a 121 KB compiler error log."""
        return self.exit_code is not None and not self.bytes and bool(self.stderr_bytes)

    def _named(self) -> str:
        return f"`{self.tool}`" if self.tool else "a tool with no name"

    def body(self) -> str:
        parts = []
        if self.shape_text:
            parts.append("Shape:\n" + self.shape_text)
        if self._stderr_only():
            parts.append(f"{self.stream or 'stdout'}: empty.")
        elif self.preview:
            what = (f"Preview ({self.stream or 'stdout'})" if self.kind == "shell" or self.exit_code is not None
                    else "Preview")
            parts.append(f"{what}{' — partial' if self.truncated else ' — complete'}:\n{self.preview}")
        if self.omitted and not self._stderr_only():  # of stdout: there was nothing on it to leave out
            parts.append(self.omitted[:1].upper() + self.omitted[1:] + ".")
        if self.stderr is not None and self.terse and not self.stderr:
            where = (f", stored whole as {self.stderr_artifact_id}" if self.stderr_artifact_id else "")
            parts.append(f"stderr ({_n(self.stderr_bytes)} bytes{where}): not shown.")
        elif self.stderr is not None:
            where = (f" stored whole as {self.stderr_artifact_id}" if self.stderr_artifact_id else "")
            cut = " — partial" if self.stderr_truncated else ""
            parts.append(f"stderr ({_n(self.stderr_bytes)} bytes{where}){cut}:\n{self.stderr}")
        return "\n".join(parts)

    def _grep(self) -> str:
        """The example pattern of the next calls: the words of the error lines the preview listed only the
        first of (content.lines.error_grep), else a placeholder."""
        patterns = [p for p in (self.extra.get("error_grep"), self.stderr_grep) if p]
        if len(patterns) == 2 and not any(p.startswith("(?") for p in patterns):  # the next calls read both
            patterns = ["|".join(dict.fromkeys(patterns[0].split("|") + patterns[1].split("|")))]
        return _q(patterns[0] if patterns else "regex")

    def footer(self) -> str:
        if not self.stored:
            return ""
        aid = self.artifact_id
        lines = []
        if self.hints:
            # the call once, then the bare expressions: the id repeated on every line cost ~20 tokens a hint
            lines.append(f'JMESPath hints, each run on the stored document; pass one as '
                         f'query_artifact(artifact_id="{aid}", jmespath=…):')
            for hint in self.hints:
                result = f"  → {hint['result']}" if hint.get("result") else ""
                lines.append(f"  {hint['jmespath']}{result}")
        if self.kind == "binary":
            lines.append(f'Next: fetch_slice(artifact_id="{aid}", unit="bytes", offset=0, limit=256) reads raw bytes.')
            return "\n".join(lines)
        stderr_aid = self.stderr_artifact_id
        if stderr_aid and not self.bytes:  # nothing on stdout: the calls read the stored stderr
            aid, stderr_aid = stderr_aid, None
        if self.terse:
            unit = "" if self.items is None else ', unit="items"' + (
                f", path={_q(self.items_path)}" if self.items_path else "")
            way = "jmespath=…" if self.kind in ("json", "ndjson") else f"grep={self._grep()}"
            also = f'; fetch_slice(artifact_id="{stderr_aid}") reads stderr' if stderr_aid else ""
            lines.append(f'Next: fetch_slice(artifact_id="{aid}"{unit}, offset=0, limit=100); '
                         f'query_artifact(artifact_id="{aid}", {way}){also}.')
            return "\n".join(lines)
        if self.entries:  # NUL-separated: lines would be the whole output at once
            calls = [f'fetch_slice(artifact_id="{aid}", unit="items", offset=0, limit=100) pages the entries as JSON '
                     'strings (offset=-40: the last 40)',
                     f'query_artifact(artifact_id="{aid}", grep="regex", context=2) matches entries, numbered as '
                     'those pages number them']
            if stderr_aid:
                calls.append(f'fetch_slice(artifact_id="{stderr_aid}") reads stderr')
            lines.append("Next: " + "; ".join(calls) + ".")
            return "\n".join(lines)
        calls = [f'fetch_slice(artifact_id="{aid}", offset=0, limit=100) pages lines (offset=-40: the last 40)']
        if self.items is not None:
            path = f", path={_q(self.items_path)}" if self.items_path else ""
            calls.append(f'unit="items"{path} pages whole items')
        kind = self.kind if self.kind != "shell" else _STORED_AS.get(self.content_type, "shell")  # its stdout's
        ways = ["jmespath=…"] if kind in ("json", "ndjson") else []
        # SQL reads a JSON document's main array: one without (an object of objects) was offered it, and refused
        tabular = kind in ("ndjson", "csv") or (kind == "json" and self.items is not None)
        rows = f" (the rows of {self.items_path})" if kind == "json" and self.items_path not in (None, "@") else ""
        ways += [f'sql="SELECT … FROM artifact"{rows}'] if tabular else []
        ways.append(f"grep={self._grep()}, context=2")
        calls.append(f'query_artifact(artifact_id="{aid}", {" | ".join(ways)}) extracts')
        if stderr_aid:
            calls.append(f'the same with artifact_id="{stderr_aid}" reads stderr')
        lines.append("Next: " + "; ".join(calls) + ".")
        return "\n".join(lines)


EMPTY_NOTE = "empty result: 0 bytes"  # detection's note on an empty result (`content.detect`)

# A shell result's stdout of these types is stored as this kind (Offloader: `_QUERIED_AS`), and queried so
_STORED_AS = {"application/json": "json", "application/x-ndjson": "ndjson", "text/csv": "csv",
              "text/tab-separated-values": "csv"}


def _q(text: str) -> str:
    """A string literal for the example calls: double quotes, with inner quotes escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
