"""Token counters the content tests check budgets with: a real tokenizer, and a crude conservative one."""

import bpe_openai
import pytest

_encoding = bpe_openai.get_encoding("o200k_base")


def o200k(text: str) -> int:
    return len(_encoding.encode(text, disallowed_special=()))


def crude(text: str) -> int:
    return len(text) // 3 + 1


COUNTERS = [pytest.param(o200k, id="o200k"), pytest.param(crude, id="crude")]
BUDGETS = [100, 300, 800, 2000]
