"""The one-line texts the guard puts in place of what leaves the context: each names the artifact that
holds it and the call that gets it back."""

from __future__ import annotations

from dataclasses import dataclass

from ..reference import KIND_LABELS
from .measure import MARK


@dataclass
class Stored:
    """An artifact the guard stored, or found already stored (`reused`), for some content."""

    artifact_id: str
    kind: str
    bytes: int
    lines: int
    reference: str | None  # the reference text, when this guard stored it
    reused: bool


def text_placeholder(tool: str, stored: Stored) -> str:
    aid = stored.artifact_id
    label = KIND_LABELS.get(stored.kind, stored.kind)
    if stored.kind == "binary":  # pages of bytes (base64); lines and grep are refused for binary data
        return (f"{MARK}Removed to fit the context window: this result of `{tool}` ({label}, {stored.bytes:,} bytes) "
                f"is stored whole as {aid}; fetch_slice(artifact_id=\"{aid}\", unit=\"bytes\", offset=0, limit=256) "
                "reads its raw bytes.")
    how = 'jmespath="expression"' if stored.kind in ("json", "ndjson") else 'grep="regex", context=2'
    return (f"{MARK}Removed to fit the context window: this result of `{tool}` ({label}, {stored.bytes:,} bytes, "
            f"{stored.lines:,} lines) is stored whole as {aid}; fetch_slice(artifact_id=\"{aid}\", offset=0, "
            f"limit=100) pages it, query_artifact(artifact_id=\"{aid}\", {how}) searches it.")


def block_placeholder(tool: str, block: dict, stored: Stored) -> str:
    kind = str(block.get("type") or "content")
    article = "an" if kind[:1].lower() in "aeiou" else "a"  # "an image block", "an input_image block"
    return (f"{MARK}Removed to fit the context window: {article} {kind} block of this result of `{tool}` is stored "
            f"whole as {stored.artifact_id} (the block as JSON, {stored.bytes:,} bytes).")


def note_text(count: int, artifact_id: str, chained: bool) -> str:
    earlier = "; its first item is the note of a span dropped before" if chained else ""
    return (f"{MARK}Dropped to fit the context window: {count:,} earlier messages are stored whole as "
            f"{artifact_id} (a JSON array of the messages{earlier}); fetch_slice(artifact_id=\"{artifact_id}\", "
            f"unit=\"items\", offset=0, limit=20) reads them back, query_artifact(artifact_id=\"{artifact_id}\", "
            f"grep=\"regex\") searches them.")
