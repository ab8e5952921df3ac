"""What the context guard measures: a message's tokens (its JSON, media priced apart, plus a per-message
overhead), a tool result's parts, and offload's own texts, which are recognised and left alone."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from .formats import IMAGE_BLOCKS, MEDIA_BLOCKS, TEXT_BLOCKS
from .. import jsontext

OVERHEAD = 4  # tokens per message for its role and separators (OpenAI documents 3-4)
IMAGE_TOKENS = 1600  # an image at the providers' default maximum size (Anthropic ~1,600; OpenAI <= 1,105)
MARK = "[offload] "
_MAX_MARKED = 64_000  # chars: a longer text that starts with MARK is a result, not one of offload's texts
_ARTIFACT_ID = re.compile(r"\bart_[a-z2-7]{16}\b")  # as `new_id` writes them


def is_offload_text(value: Any) -> bool:
    """A reference, placeholder or note written by offload: left alone, never stored again. A result that
    only looks like one ("[offload] see art_abc in the log" atop a log) is told apart by its size: see
    `split_parts`."""
    return (isinstance(value, str) and value.startswith(MARK) and len(value) < _MAX_MARKED
            and _ARTIFACT_ID.search(value, 0, 4000) is not None)


def dumps(value: Any, *, indent: bool = False) -> bytes:
    return jsontext.dumps(value, indent=indent, non_str_keys=True)


def media_tokens(block: dict) -> int:
    if block.get("type") in IMAGE_BLOCKS:
        return IMAGE_TOKENS
    return max(IMAGE_TOKENS, len(dumps(block)) // 4)  # documents, files, audio: by their encoded size


def strip_media(value: Any) -> tuple[Any, int]:
    """`value` with media blocks cut down to their type, and the tokens those blocks cost."""
    if isinstance(value, dict):
        if value.get("type") in MEDIA_BLOCKS:
            return {"type": value["type"]}, media_tokens(value)
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return value, 0
    copy, cost = None, 0
    for key, item in items:
        if isinstance(item, (dict, list)):
            stripped, tokens = strip_media(item)
            if stripped is not item:
                if copy is None:
                    copy = dict(value) if isinstance(value, dict) else list(value)
                copy[key] = stripped
                cost += tokens
    return (copy if copy is not None else value), cost


@dataclass
class Part:
    """One piece of a result's content: text, a block (image, document, ...) or something kept as it is."""

    kind: str  # "text" | "block" | "kept"
    value: Any  # the text, or the block
    tokens: int


def split_parts(content: Any, count: Callable[..., int], kept_tokens: int) -> list[Part]:
    """A result's content as parts: its text, its blocks (image, document...) and what is kept as it is.

    A text is kept when offload wrote it (`is_offload_text`) and it is no bigger than what offload
    writes: `kept_tokens`, twice the reference budget. A bigger one is a result that starts the same way,
    and kept, it was exempt from the cap and the placeholders: a fit of it failed.
    """
    def text_part(text: str) -> Part:
        tokens = count(text)
        return Part("kept" if tokens <= kept_tokens and is_offload_text(text) else "text", text, tokens)

    if isinstance(content, str):
        return [text_part(content)]
    if not isinstance(content, list):
        return []  # None, or a structure the API needs as it is (a computer screenshot): kept
    parts = []
    for block in content:
        if not isinstance(block, dict):
            parts.append(Part("kept", block, count(dumps(block).decode(), "json")))
        elif block.get("type") in TEXT_BLOCKS and isinstance(block.get("text"), str):
            parts.append(text_part(block["text"]))
        elif block.get("type") in MEDIA_BLOCKS:
            parts.append(Part("block", block, media_tokens(block)))
        else:
            parts.append(Part("block", block, count(dumps(block).decode(), "json")))
    return parts


def count_message(data: dict, count: Callable[..., int]) -> int:
    """Tokens of one message: its JSON (media blocks priced apart) plus a per-message overhead."""
    stripped, media = strip_media(data)
    return count(dumps(stripped).decode("utf-8", "replace"), "json") + media + OVERHEAD
