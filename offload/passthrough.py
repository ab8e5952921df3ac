"""Whether a tool result passes through to the model as it is: within its tool's limit in every form a
model may read it (its text and the JSON string of its structured form), for a shell result stdout and
stderr each within their own limit and together within their sum. Every call pays this, so it counts
only what it must: bytes first (a token is at least a byte), the estimate next, the real tokenizers last
(`referencing.Measure.within`)."""

from __future__ import annotations

import json

from .jsontext import dumps
from .referencing import Measure
from .results import Payload, cheap_fits, sent_bytes
from .settings import Settings
from .tokens import TokenCounter, surely_over, utf8_size

_SEPARATOR_TOKENS = 16  # stdout and stderr joined (`\n[stderr]\n`) take at most this more than the two apart


class PassThrough:
    """The pass-through decision of an Offloader, over its settings, counter and measure."""

    def __init__(self, settings: Settings, counter: TokenCounter, measure: Measure):
        self.settings, self.counter, self.measure = settings, counter, measure

    def fits(self, tool: str, payload: Payload) -> bool:
        """Whether `payload` reaches the model as it is, within `tool`'s limit."""
        key = self.settings.budget_key(tool)
        limit = self.settings.limit(key)
        if payload.is_shell:
            return self._shell_fits(key, limit, payload)
        if cheap_fits(payload, limit):
            return True
        if not self.counter.exact and surely_over(len(payload.data), limit):
            return False  # the result's reference estimates it once, not twice (~2 ms a MB)
        return self._held(_text_of(payload.data, payload.text), limit, structured=not payload.is_object)[0] <= limit

    def _held(self, text: str, limit: int, *, structured: bool = True) -> tuple[int, int]:
        """Tokens of a result's `text` passed through to the model, held to `limit` (`Measure.within`):
        the text itself, and (`structured`) the JSON string its structured form carries it in
        (`{"result": …}`, `{"stdout": …}`: an ANSI colour code's ESC is six characters there, a newline
        two), the larger; and the most tokens a real count of it can be (see `_shell_fits`). Of the two
        forms, only the JSON string is counted by the real tokenizers, when it could be over `limit` by
        them: escaping adds characters, and on each of the 5,081 texts of the calibration windows (8,000
        characters of every corpus of benchmarks/token_calibration.py) both real counts of it were at
        least the text's."""
        count = self.measure.within(limit)
        counted = json.dumps(text, ensure_ascii=False) if structured else text
        held = count(counted)
        if structured and held <= limit:  # over is over: no second count
            held = max(self.counter.count(text), held)
        size = utf8_size(counted)
        return held, held if size > limit else max(held, size)

    def _shell_fits(self, key: str, limit: int, payload: Payload) -> bool:
        """stdout within its limit, stderr within its own (a shell tool's: `shell_stderr`), and the two
        together within their sum and the window's share: a result never takes more of the window
        than one result may. Under another tool's name, stdout and stderr share its one limit."""
        if key == "shell":
            err_limit = self.settings.limit("shell_stderr")
            total_limit = min(limit + err_limit, self.settings.window_cap or limit + err_limit)
        else:
            err_limit = total_limit = limit
        if payload.fields:  # shown whole beside them: their JSON's bytes bound their tokens
            total_limit -= len(dumps(payload.fields))
        out, err = payload.data, payload.stderr or b""
        if len(out) + len(err) <= total_limit:  # perhaps too small to estimate: a token is at least a byte
            sent = sent_bytes(out, payload.text is None), sent_bytes(err, True)
            if sent[0] <= limit and sent[1] <= err_limit and sum(sent) <= total_limit:
                return True
        sizes = ((len(out), limit), (len(err), err_limit), (len(out) + len(err), total_limit))
        if not self.counter.exact and any(surely_over(size, allowed) for size, allowed in sizes):
            return False  # as below
        out_text = _text_of(out, payload.text)
        out_held, out_most = self._held(out_text, limit)
        if out_held > limit:
            return False
        if not err:
            return True
        err_text = _text_of(err, None)
        err_held, err_most = self._held(err_text, err_limit)
        if err_held > err_limit:
            return False
        # the two together, as the text and the structured form hold them: counted again only when the
        # parts do not bound the whole. A part's `most` is at least its estimate and its real count (it
        # was counted by the tokenizers, or is too few bytes to be more), and the separator adds at most
        # _SEPARATOR_TOKENS to either count of the two apart
        if out_most + err_most + _SEPARATOR_TOKENS <= total_limit:
            return True
        return self._held(f"{out_text}\n[stderr]\n{err_text}", total_limit)[0] <= total_limit


def _text_of(data: bytes, text: str | None) -> str:
    """A result's text as the model reads it: bytes that are not UTF-8 as U+FFFD, as the adapters decode them."""
    return text if text is not None else data.decode("utf-8", errors="replace")
