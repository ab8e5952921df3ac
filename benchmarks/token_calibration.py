"""Calibrate `offload.tokens.estimate_tokens` against o200k_base and cl100k_base on real data.

Builds corpora per content kind from what this machine holds (stdlib sources, grep and shell output,
JSON/NDJSON/CSV made from stdlib, pip and botocore data, docs, man pages, gettext catalogues in ~150
languages, the Chinese articles in /work/shared/seeds) plus synthetic stress cases (hex, base64, digits,
identifiers, punctuation), then prints estimate/real per corpus and a summary per kind and scope:

- typical: what tool results usually are; the estimate should be 1.0-1.5x the real count;
- edge: must still be >= 0.9x (digits, hashes, base64, scripts, emoji, languages offload covers);
- out: outside the guarantee, shown so the limits are known (random character soup, rare-syllable
  Korean test strings, Latin-script languages and name lists that cl100k splits into short pieces).

    python benchmarks/token_calibration.py            # table + summary
    python benchmarks/token_calibration.py --speed    # also time the estimator from 100 chars to 10 MB
"""

from __future__ import annotations

import ast
import base64
import csv
import dis
import gettext
import glob
import gzip
import hashlib
import io
import json
import os
import random
import re
import string
import subprocess
import sys
import sysconfig
import time
import unicodedata
import uuid
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from offload.tokens import KINDS, estimate_tokens, exact_tokenizer  # noqa: E402

STDLIB = Path(os.__file__).parent
CAP = 400_000  # characters per corpus: enough for stable ratios, quick to tokenize
rng = random.Random(20261201)
# Latin-script languages inside the guarantee; the others are measured and reported as "out".
LATIN_COVERED = {"fr", "de", "es", "it", "pt", "pt_BR", "nl", "pl", "sv", "da", "nb", "nn", "ca", "gl", "ro",
                 "id", "hu", "tr", "cs", "sk", "hr", "sl", "vi", "en_GB", "en_AU", "en_CA", "en@quot", "en@boldquot"}


class Corpus(NamedTuple):
    kind: str
    name: str
    text: str
    scope: str  # "typical", "edge" or "out"


def _read(path: Path | str) -> str:
    data = Path(path).read_bytes()
    if str(path).endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def _run(*cmd: str) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=60, env={**os.environ, "MANWIDTH": "100"})
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (out.stdout + out.stderr).decode("utf-8", errors="replace")


def _glob(pattern: str) -> list[str]:
    return sorted(glob.glob(pattern, recursive=True))


def _cat(paths, cap: int = CAP) -> str:
    parts, size = [], 0
    for p in paths:
        try:
            text = _read(p)
        except (OSError, ValueError):
            continue
        parts.append(text)
        size += len(text)
        if size >= cap:
            break
    return "".join(parts)[:cap]


def _mo_strings(lang: str, cap: int = 100_000) -> str:
    """Translated messages from the gettext catalogues of one language."""
    out = []
    for mo in _glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo"):
        try:
            with open(mo, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog
        except Exception:  # a malformed catalogue is skipped: this is calibration data
            continue
        out.extend(v for v in catalog.values() if isinstance(v, str) and v)
    return "\n".join(out)[:cap]


def _man(lang: str | None, names: list[str]) -> str:
    pages = [_run("man", "-P", "cat", *(["-L", lang] if lang else []), name) for name in names]
    return re.sub(".\b", "", "".join(pages))[:CAP]  # drop overstrike bold/underline


def _is_latin(text: str) -> bool:
    letters = [ch for ch in text if ord(ch) > 127 and ch.isalpha()]
    latin = sum(1 for ch in letters if ord(ch) <= 0x2FF or 0x1E00 <= ord(ch) <= 0x1EFF)  # with IPA, modifiers
    return latin >= 0.9 * len(letters)


# ---------------------------------------------------------------- records built from real data
def _words(path: Path) -> list[str]:
    return re.findall(r"[A-Za-z]+", _read(path))


def _api_records(n: int) -> list[dict]:
    words, modules = _words(STDLIB / "argparse.py"), sorted(sys.stdlib_module_names)
    return [{
        "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "seq": i,
        "created_at": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
                      f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}Z",
        "status": rng.choice(["ok", "error", "pending", "retrying"]),
        "module": rng.choice(modules),
        "latency_ms": round(rng.lognormvariate(3, 1), 3),
        "bytes": rng.randint(0, 10**9),
        "sha256": hashlib.sha256(str(i).encode()).hexdigest(),
        "message": " ".join(rng.choices(words, k=rng.randint(3, 15))),
        "tags": rng.sample(modules, 3),
        "score": rng.random(),
    } for i in range(n)]


def _stat_records() -> list[dict]:
    out = []
    for p in sorted(STDLIB.rglob("*.py"))[:3000]:
        st = p.stat()
        out.append({"path": str(p), "size": st.st_size, "mode": oct(st.st_mode), "inode": st.st_ino,
                    "mtime": st.st_mtime, "uid": st.st_uid, "nlink": st.st_nlink})
    return out


def _unicode_records() -> list[dict]:
    return [{"cp": cp, "hex": f"U+{cp:04X}", "char": chr(cp), "name": unicodedata.name(chr(cp)),
             "category": unicodedata.category(chr(cp)), "bidi": unicodedata.bidirectional(chr(cp)),
             "decimal": unicodedata.decimal(chr(cp), None), "mirrored": unicodedata.mirrored(chr(cp))}
            for cp in range(0x20, 0x3000) if unicodedata.name(chr(cp), "")]


def _dis_records() -> list[dict]:
    import argparse
    return [{"offset": i.offset, "opname": i.opname, "opcode": i.opcode, "arg": i.arg, "argrepr": i.argrepr,
             "line": i.positions.lineno, "col": i.positions.col_offset}
            for fn in vars(argparse.ArgumentParser).values() if hasattr(fn, "__code__")
            for i in dis.get_instructions(fn)]


def _ast_json() -> object:
    def conv(node):
        if isinstance(node, ast.AST):
            out = {"_type": type(node).__name__, **{k: conv(v) for k, v in ast.iter_fields(node)}}
            out.update({k: getattr(node, k) for k in ("lineno", "col_offset", "end_lineno") if hasattr(node, k)})
            return out
        if isinstance(node, list):
            return [conv(x) for x in node]
        return node if isinstance(node, (str, int, float, bool, type(None))) else repr(node)
    return conv(ast.parse(_read(STDLIB / "json" / "decoder.py")))


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()[:CAP]


def _numeric_csv(n: int) -> str:
    buf, price = io.StringIO(), 100.0
    writer = csv.writer(buf)
    writer.writerow(["date", "open", "high", "low", "close", "volume", "ticker_id"])
    for i in range(n):
        price *= 1 + rng.gauss(0, 0.02)
        writer.writerow([f"2025-{1 + i % 12:02d}-{1 + i % 28:02d}", f"{price:.2f}", f"{price * 1.01:.2f}",
                         f"{price * 0.99:.2f}", f"{price * (1 + rng.gauss(0, 0.005)):.4f}",
                         rng.randint(1000, 10**8), rng.randint(1, 9999)])
    return buf.getvalue()[:CAP]


# ---------------------------------------------------------------- shell-like output
def _grep(pattern: str, root: Path, glob_pat: str = "*.py") -> str:
    out, size = [], 0
    for p in sorted(root.rglob(glob_pat)):
        try:
            lines = p.read_text(errors="replace").splitlines()
        except OSError:
            continue
        hits = [f"{p}:{n}:{line}" for n, line in enumerate(lines, 1) if pattern in line]
        out.extend(hits)
        size += sum(map(len, hits))
        if size > CAP:
            break
    return "\n".join(out)[:CAP]


def _ls_l(root: Path) -> str:
    lines = []
    for p in sorted(root.rglob("*"))[:6000]:
        st = p.lstat()
        lines.append(f"{'d' if p.is_dir() else '-'}rw-r--r-- {st.st_nlink:2d} root root {st.st_size:9d} "
                     f"{time.strftime('%b %d %H:%M', time.localtime(st.st_mtime))} {p.relative_to(root)}")
    return "\n".join(lines)[:CAP]


def _sha256sum(root: Path) -> str:
    return "\n".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p}" for p in sorted(root.rglob("*.py"))[:3000])


def _build_log() -> str:
    headers = _glob("/usr/include/**/*.h")[:1500] or [str(p) for p in sorted(STDLIB.rglob("*.py"))[:1500]]
    lines = []
    for i, h in enumerate(headers):
        obj = Path(h).stem
        lines.append(f"[{i + 1}/{len(headers)}] gcc -O2 -g -Wall -Wextra -fPIC -I/usr/include -I./src -DNDEBUG "
                     f"-MD -MT src/{obj}.o -MF src/{obj}.o.d -c src/{obj}.c -o src/{obj}.o")
        if rng.random() < 0.1:
            lines.append(f"src/{obj}.c:{rng.randint(1, 2000)}:{rng.randint(1, 80)}: warning: unused variable "
                         f"'{obj}_tmp' [-Wunused-variable]")
    for i in range(200):
        lines.append(f"#{i} DONE {rng.random() * 30:.1f}s")
        lines.append(f"#{i} writing layer sha256:{hashlib.sha256(str(i).encode()).hexdigest()} {rng.random() * 9:.2f}MB")
    return "\n".join(lines)[:CAP]


def _hexdump(data: bytes) -> str:
    lines = []
    for off in range(0, min(len(data), 40_000), 16):
        chunk = data[off:off + 16]
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {' '.join(f'{b:02x}' for b in chunk):<47}  |{printable}|")
    return "\n".join(lines)


def _git_log(words: list[str]) -> str:
    return "\n".join(f"commit {rng.randbytes(20).hex()}\nAuthor: {rng.choice(words)} <{rng.choice(words)}@example.com>\n"
                     f"Date:   Mon Mar {rng.randint(1, 28)} 12:{rng.randint(10, 59)}:01 2026 +0000\n\n"
                     f"    {' '.join(rng.sample(words, 6))}\n" for _ in range(2000))


def _regex_literals() -> str:
    found = []
    for p in sorted(STDLIB.rglob("*.py"))[:1500]:
        try:
            tree = ast.parse(p.read_text(errors="replace"))
        except (SyntaxError, ValueError, OSError):
            continue
        found += [node.args[0].value for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("compile", "match", "search", "sub")
                  and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)]
    return "\n".join(found)


# ---------------------------------------------------------------- hand-written multilingual prose
CJK_ZH = ("工具调用返回的结果如果过大，会直接挤占模型的上下文窗口。我们的做法是把原始结果完整地保存在本地存储中，"
          "只给模型一个简短的引用，包括前几行预览、总行数和可以继续查询的工具。这样模型既不会丢失信息，也不会被一次"
          "巨大的返回值淹没。在实际测试中，一次代码搜索返回了五十万字节的文本，按照每四个字符一个词元来估算，"
          "就会消耗十二万个词元，几乎占满整个窗口。\n")
CJK_JA = ("ツールの実行結果が大きすぎると、モデルのコンテキストウィンドウがすぐに埋まってしまいます。そこで、結果は"
          "ローカルのストレージにそのまま保存し、モデルには短い参照だけを渡します。参照には先頭数行のプレビュー、"
          "全体の行数、続きを読むためのツールが含まれます。日本語の文章はひらがな、カタカナ、漢字が混ざっています。\n")
CJK_KO = ("도구 호출 결과가 너무 크면 모델의 컨텍스트 창이 금방 가득 찹니다. 그래서 원본 결과는 로컬 저장소에 그대로 "
          "보관하고, 모델에게는 미리보기 몇 줄과 전체 줄 수, 그리고 나머지를 읽을 수 있는 도구만 담긴 짧은 참조를 "
          "보여 줍니다. 이렇게 하면 정보를 잃지 않으면서도 창을 아낄 수 있습니다.\n")
MIXED = ("部署 offload 之后，运行 `offload ls --json` 可以看到所有 artifact（例如 art_3f9c2d1e）。"
         "If the result is larger than 20k tokens, the model sees a reference instead: 共 12,345 行，约 98 KB。"
         "Le résultat complet reste disponible ; la référence indique « 12 345 lignes » et l’outil à appeler. "
         "Größere Ergebnisse werden übersprungen, nicht gelöscht — die Prüfsumme (SHA-256) bleibt gültig. 🚀✅📦\n")
EMOJI_CHAT = ("Deployed to staging 🚀🚀 — all green ✅✅✅ except the flaky upload test 😅. "
              "Rolling back in 5 min ⏱️ if p95 > 300ms 📈. Thanks team 🙏🎉👏 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵\n")
LATIN = ("Le résultat d’un outil peut être énorme : des milliers de lignes, des fichiers entiers, des réponses "
         "d’API très longues. Plutôt que de tout envoyer au modèle, on conserve l’original et on lui montre un aperçu. "
         "Über die Größe des Ergebnisses entscheidet nicht das Werkzeug, sondern die Anfrage; übermäßig große Antworten "
         "werden ausgelagert. La información completa se guarda; el modelo recibe una referencia pequeña y útil. "
         "Zażółć gęślą jaźń. Příliš žluťoučký kůň úpěl ďábelské ódy. Árvíztűrő tükörfúrógép.\n")
SCRIPTS = {
    "Greek": "Το αποτέλεσμα του εργαλείου είναι πολύ μεγάλο και αποθηκεύεται τοπικά· το μοντέλο βλέπει μόνο μια σύντομη αναφορά. ",
    "Russian": "Результат инструмента слишком велик, поэтому мы сохраняем его локально и показываем модели "
               "только короткую ссылку. ",
    "Arabic": "نتيجة الأداة كبيرة جدًا، لذلك نحفظها محليًا ونعرض للنموذج مرجعًا قصيرًا فقط. ",
    "Hebrew": "התוצאה של הכלי גדולה מדי, ולכן אנחנו שומרים אותה מקומית ומציגים למודל רק הפניה קצרה. ",
    "Hindi": "उपकरण का परिणाम बहुत बड़ा है, इसलिए हम इसे स्थानीय रूप से सहेजते हैं और मॉडल को केवल एक छोटा संदर्भ दिखाते हैं। ",
    "Thai": "ผลลัพธ์ของเครื่องมือมีขนาดใหญ่มาก เราจึงเก็บไว้ในเครื่องและแสดงเฉพาะข้อมูลอ้างอิงสั้นๆ ให้โมเดลเห็น ",
}


def _identifiers(words: list[str], sep: str, n: int) -> str:
    if sep == "camel":
        return " ".join("".join(w.capitalize() if i else w for i, w in enumerate(rng.sample(words, 3))) for _ in range(n))
    return " ".join(sep.join(rng.sample(words, 3)).lower() for _ in range(n))


def _synthetic(words: list[str]) -> list[Corpus]:
    """Stress cases: the shapes that tokenize worst per character, in realistic and unrealistic form."""
    r = rng
    E = lambda name, text: Corpus("text", name, text, "edge")  # noqa: E731
    O = lambda name, text: Corpus("text", name, text, "out")  # noqa: E731
    return [
        E("uuid list", "\n".join(str(uuid.UUID(int=r.getrandbits(128))) for _ in range(3000))),
        E("sha256 list", "\n".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(2000))),
        E("hex lower / upper / run-on", "\n".join(r.randbytes(20).hex() for _ in range(2000)) + "\n"
          + "\n".join(r.randbytes(16).hex().upper() for _ in range(2000)) + "\n" + r.randbytes(20000).hex()),
        E("base64 blob (76 cols)", base64.encodebytes(r.randbytes(60_000)).decode()),
        E("base64 one line", base64.b64encode(r.randbytes(60_000)).decode()),
        E("base64url bearer tokens", "\n".join(f"Bearer {base64.urlsafe_b64encode(r.randbytes(48)).decode()}"
                                                for _ in range(1000))),
        E("jwt-like", "\n".join(".".join(base64.urlsafe_b64encode(r.randbytes(k)).decode().rstrip("=") for k in (36, 120, 32))
                                for _ in range(500))),
        E("prose with base64 attachment", _read(STDLIB / "LICENSE.txt")[:20_000] + base64.b64encode(r.randbytes(15_000)).decode()
          if (STDLIB / "LICENSE.txt").exists() else ""),
        E("numbers one per line", "\n".join(str(r.randint(0, 10 ** r.randint(1, 12))) for _ in range(20_000))),
        E("floats space separated", " ".join(f"{r.gauss(0, 100):.6f}" for _ in range(20_000))),
        E("single digits, comma / space", ",".join(str(r.randint(0, 9)) for _ in range(30_000)) + "\n"
          + " ".join(str(r.randint(0, 9)) for _ in range(30_000))),
        E("digits 4 per group", " ".join(str(r.randint(1000, 9999)) for _ in range(30_000))),
        E("digit run-on", "".join(str(r.randint(0, 9)) for _ in range(90_000))),
        E("ipv4 / ipv6 addresses", "\n".join(".".join(str(r.randint(0, 255)) for _ in range(4)) + f":{r.randint(1, 65535)}"
                                           for _ in range(4000)) + "\n"
          + "\n".join(":".join(f"{r.getrandbits(16):x}" for _ in range(8)) for _ in range(2000))),
        E("timestamps log", "\n".join(f"2026-03-{r.randint(1, 28):02d} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:"
                                      f"{r.randint(0, 59):02d},{r.randint(0, 999):03d} INFO req={r.randbytes(6).hex()} "
                                      f"took {r.randint(1, 5000)}ms" for _ in range(5000))),
        E("ALL CAPS prose", _read(STDLIB / "LICENSE.txt").upper() if (STDLIB / "LICENSE.txt").exists() else ""),
        E("camelCase identifiers", _identifiers(words, "camel", 8000)),
        E("snake_case identifiers", _identifiers(words, "_", 8000)),
        E("deep indentation", "\n".join(" " * (4 * r.randint(0, 12)) + " ".join(r.sample(words, 3)) for _ in range(8000))),
        E("blank-line heavy", "\n\n\n".join(r.choice(words) for _ in range(20000))),
        E("regex literals (stdlib)", _regex_literals()),
        E("operator soup", "\n".join(" ".join(r.choice(["a", "x", "ptr"]) + r.choice(["&&", "||", "!=", "->", "::", "<<", "+="])
                                             + r.choice(["y", "n", "buf"]) + r.choice("()[]{};,") for _ in range(8))
                                    for _ in range(3000))),
        E("written zh / ja / ko", (CJK_ZH + CJK_JA + CJK_KO) * 20),
        E("written mixed zh/en/fr/de + emoji", MIXED * 20),
        E("written emoji chat", EMOJI_CHAT * 30),
        E("written accented latin", LATIN * 20),
        E("emoji only", "".join(r.choice("😀😃😄😁😆😅🤣😂🙂🙃😉😊😇🥰😍🤩😘🚀✅📦🔥💯🎉👍🏽👨‍👩‍👧‍👦🇫🇷🇯🇵") for _ in range(5000))),
        *[E(f"written {lang}", text * 200) for lang, text in SCRIPTS.items()],
        O("random punctuation", "".join(r.choice(string.punctuation) for _ in range(50_000))),
        O("random printable ASCII", "".join(r.choice(string.printable[:95]) for _ in range(50_000))),
        E("random lowercase 'words'", " ".join("".join(r.choice(string.ascii_lowercase) for _ in range(r.randint(1, 10)))
                                               for _ in range(10_000))),
        E("base32 ids", "\n".join("art_" + "".join(r.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(16))
                                   for _ in range(5_000))),
        E("base36 names", "\n".join(f"/tmp/tmp{''.join(r.choice(string.ascii_lowercase + string.digits) for _ in range(8))}"
                                     f" web-{''.join(r.choice('bcdfghjklmnpqrstvwxz2456789') for _ in range(5))}"
                                     for _ in range(5_000))),
        O("random CJK ideographs", "".join(chr(r.randint(0x4E00, 0x9FFF)) for _ in range(20_000))),
        O("random Hangul syllables", "".join(chr(r.randint(0xAC00, 0xD7A3)) for _ in range(20_000))),
        O("random characters beyond U+FFFF", "".join(chr(r.randint(0x10000, 0x3FFFF)) for _ in range(10_000))),
    ]


def build_corpora() -> list[Corpus]:
    """Every corpus this machine can provide; missing sources are left out."""
    c: list[Corpus] = []

    def add(kind: str, name: str, text: str, scope: str = "typical") -> None:
        if text and len(text) > 200:
            c.append(Corpus(kind, name, text, scope))

    words = _words(STDLIB / "argparse.py")
    # text: code, prose, markup
    add("text", "stdlib py (argparse, typing, inspect)", _cat(STDLIB / f for f in ["argparse.py", "typing.py", "inspect.py"]))
    add("text", "stdlib asyncio/*.py", _cat(sorted((STDLIB / "asyncio").glob("*.py"))))
    add("text", "stdlib email/*.py", _cat(sorted((STDLIB / "email").glob("*.py"))))
    add("text", "stdlib test_*.py", _cat(sorted((STDLIB / "test").glob("test_[a-d]*.py"))))
    add("text", "sysconfigdata (dict literal)", _cat(_glob(f"{STDLIB}/_sysconfigdata_*.py")))
    add("text", "/usr/include *.h (C)", _cat(_glob("/usr/include/*.h")))
    add("text", "C sources", _cat(_glob("/usr/share/doc/**/*.c") + _glob(f"{sys.base_prefix}/include/python3*/*.h")))
    add("text", "JavaScript (npm)", _cat(_glob("/usr/lib/node_modules/npm/lib/**/*.js")))
    add("text", "minified JavaScript", _cat(_glob("/usr/lib/node_modules/npm/node_modules/**/*.min.js")))
    add("text", "CSS", _cat(_glob("/root/.rustup/toolchains/stable-*/share/doc/rust/html/**/*.css")))
    add("text", "Perl", _cat(_glob("/usr/share/perl/**/*.pm")))
    add("text", "shell scripts", _cat(_glob("/usr/share/**/*.sh")))
    add("text", "HTML (rust docs)", _cat(_glob("/root/.rustup/toolchains/stable-*/share/doc/rust/html/rustc/*.html")))
    add("text", "XML (gdb syscalls, iso-codes)", _cat(_glob("/usr/share/gdb/syscalls/*.xml") + _glob("/usr/share/xml/**/*.xml")))
    add("text", "YAML (gcloud schemas)", _cat(_glob("/usr/lib/google-cloud-sdk/lib/googlecloudsdk/schemas/compute/v1/*.yaml")))
    add("text", "Markdown (nodejs docs)", _cat(_glob("/usr/share/doc/nodejs/*.md")))
    add("text", "reStructuredText", _cat(_glob("/usr/lib/google-cloud-sdk/**/*.rst")))
    add("text", "LICENSE.txt", _cat([STDLIB / "LICENSE.txt"]))
    add("text", "/usr/share/doc copyright", _cat(_glob("/usr/share/doc/*/copyright")))
    add("text", "/usr/share/doc changelogs", _cat(_glob("/usr/share/doc/*/changelog.Debian.gz")))
    add("text", "/usr/share/doc README/NEWS", _cat(_glob("/usr/share/doc/*/README*") + _glob("/usr/share/doc/*/NEWS*")))
    add("text", "man pages (rendered)", _man(None, ["bash", "ls", "grep", "find", "tar"]))
    add("text", "man roff source", _cat(_glob("/usr/share/man/man1/*.1.gz")))
    add("text", "stdlib docstrings", "\n\n".join((m.__doc__ or "") for m in map(__import__, [
        "argparse", "asyncio", "json", "re", "typing", "subprocess", "collections", "functools", "itertools",
        "unittest", "pathlib", "os", "inspect"])))
    add("text", "Pipfile.lock (hashes)", _cat(_glob("/usr/lib/google-cloud-sdk/**/Pipfile.lock")), "edge")
    # text: real non-English prose
    for f in _glob("/work/shared/seeds/*.txt"):
        add("text", f"seed article {Path(f).name[:3]} (zh)", _read(f), "edge")
    for f in sorted((STDLIB / "test" / "cjkencodings").glob("*-utf8.txt")):
        rare = f.name.startswith(("cp949", "johab"))  # rare Hangul syllables on purpose: ~1.5 tokens/char
        add("text", f"cjkencodings {f.name}", _read(f), "out" if rare else "edge")
    for lang in ["zh_CN", "ja", "ko", "ru", "de", "fr"]:
        add("text", f"man pages {lang}", _man(lang, ["man", "apropos", "login", "passwd"]), "edge")
    for lang in sorted(os.listdir("/usr/share/locale")) if os.path.isdir("/usr/share/locale") else []:
        text = _mo_strings(lang)
        if len(text) > 3000 and not text.isascii():
            covered = not _is_latin(text) or lang in LATIN_COVERED or lang == "en@shaw"
            add("text", f"gettext {lang}", text, "edge" if covered and lang != "en@shaw" else "out")
    c += [x for x in _synthetic(words) if len(x.text) > 200]

    # grep
    add("grep", "grep -rn 'def ' stdlib", _grep("def ", STDLIB))
    add("grep", "grep -rn 'import' stdlib", _grep("import", STDLIB))
    add("grep", "grep -rn 'self.' asyncio", _grep("self.", STDLIB / "asyncio"))
    add("grep", "grep -rn 'TODO' stdlib", _grep("TODO", STDLIB))
    add("grep", "grep -rn '0x' stdlib", _grep("0x", STDLIB))
    add("grep", "grep -rn define /usr/include", _grep("#define", Path("/usr/include"), "*.h"))
    add("grep", "grep '' cjkencodings", _grep("", STDLIB / "test" / "cjkencodings", "*-utf8.txt"), "edge")

    # shell
    add("shell", "ls -l stdlib", _ls_l(STDLIB / "asyncio") + "\n" + _ls_l(STDLIB / "email"))
    add("shell", "ls -la /usr/lib /usr/bin", _run("ls", "-la", "/usr/lib", "/usr/bin"))
    add("shell", "ps auxww", _run("ps", "auxww"))
    add("shell", "find /usr/lib -name *.so*", _run("find", "/usr/lib", "-name", "*.so*")[:CAP])
    add("shell", "python -X importtime", _run(sys.executable, "-X", "importtime", "-c", "import asyncio, json, http.client"))
    add("shell", "pip list", _run(sys.executable, "-m", "pip", "list"))
    add("shell", "dpkg -l", _run("dpkg", "-l")[:CAP])
    add("shell", "df -h; mount", _run("df", "-h") + _run("mount"))
    add("shell", "env", "\n".join(f"{k}={v}" for k, v in os.environ.items()))
    add("shell", "unittest -v", _run(sys.executable, "-m", "unittest", "-v", "test.test_bisect", "test.test_heapq"))
    add("shell", "traceback x20", _run(sys.executable, "-c", "import json; json.loads('{' * 10 + 'x')") * 20)
    add("shell", "build log (gcc/docker lines)", _build_log())
    add("shell", "dpkg.log", _cat(["/var/log/dpkg.log"]))
    add("shell", "apt term.log", _cat(["/var/log/apt/term.log", "/var/log/alternatives.log"]))
    add("shell", "pytest -v lines", "\n".join(f"tests/test_{rng.choice(words)}.py::test_{rng.choice(words)} "
                                              f"{rng.choice(['PASSED', 'FAILED', 'SKIPPED'])} [{i % 100:3d}%]" for i in range(5000)))
    add("shell", "git log (synthetic)", _git_log(words), "edge")
    add("shell", "sha256sum stdlib", _sha256sum(STDLIB / "email"), "edge")
    add("shell", "hexdump -C python", _hexdump(Path(sys.executable).resolve().read_bytes()[4096:]), "edge")

    # json
    pip_inspect = _run(sys.executable, "-m", "pip", "inspect")
    try:
        pip_doc = json.loads(pip_inspect[pip_inspect.index("{"):])
    except ValueError:
        pip_doc = None
    api, stats, uni, dis_rows = _api_records(1500), _stat_records(), _unicode_records(), _dis_records()
    if pip_doc:
        add("json", "pip inspect (pretty)", json.dumps(pip_doc, indent=2)[:CAP])
        add("json", "pip inspect (minified)", json.dumps(pip_doc, separators=(",", ":"))[:CAP])
    add("json", "pip list --format json", _run(sys.executable, "-m", "pip", "list", "--format", "json"))
    add("json", "api records (pretty)", json.dumps(api, indent=2)[:CAP])
    add("json", "api records (minified)", json.dumps(api, separators=(",", ":"))[:CAP])
    add("json", "os.stat records (pretty)", json.dumps(stats, indent=2)[:CAP])
    add("json", "os.stat records (minified)", json.dumps(stats, separators=(",", ":"))[:CAP])
    add("json", "unicodedata (ensure_ascii)", json.dumps(uni, indent=1)[:CAP])
    add("json", "unicodedata (utf-8)", json.dumps(uni, ensure_ascii=False)[:CAP])
    add("json", "sysconfig vars", json.dumps(sysconfig.get_config_vars(), indent=2, default=str)[:CAP])
    add("json", "dis instructions", json.dumps(dis_rows)[:CAP])
    add("json", "ast of json/decoder.py (pretty)", json.dumps(_ast_json(), indent=2)[:CAP])
    add("json", "ast of json/decoder.py (minified)", json.dumps(_ast_json(), separators=(",", ":"))[:CAP])
    add("json", "botocore service-2.json", _cat(_glob("/usr/lib/google-cloud-sdk/lib/third_party/botocore/**/service-2.json")))
    add("json", "iso-codes json", _cat(_glob("/usr/share/iso-codes/json/iso_*.json")))
    add("json", "npm package.json files", _cat(_glob("/usr/lib/node_modules/npm/node_modules/*/package.json")))
    add("json", "cmake templates json", _cat(_glob("/usr/share/cmake-*/Templates/**/*.json")))
    cjk = [{"id": i, "title": s[:20], "body": s} for i, s in enumerate((CJK_ZH + CJK_JA + CJK_KO).split("。") * 30)]
    add("json", "cjk records (utf-8)", json.dumps(cjk, ensure_ascii=False, indent=2)[:CAP], "edge")
    add("json", "cjk records (\\u escapes)", json.dumps(cjk, indent=2)[:CAP], "edge")
    add("json", "float matrix", json.dumps([[round(rng.gauss(0, 1), 6) for _ in range(20)] for _ in range(2000)])[:CAP], "edge")
    add("json", "int arrays", json.dumps({"ids": [rng.randint(0, 10**9) for _ in range(40_000)]})[:CAP], "edge")
    hex_map = {rng.randbytes(8).hex(): rng.randbytes(16).hex() for _ in range(5000)}
    add("json", "hex ids map", json.dumps(hex_map, indent=2), "edge")
    images = [{"name": f"img_{i}.png", "data": base64.b64encode(rng.randbytes(600)).decode()} for i in range(400)]
    add("json", "records with base64 payloads", json.dumps(images, indent=2)[:CAP], "edge")
    add("json", "deep nesting (pretty)", json.dumps([[[[{"k": [1, [2, [3]]]}]]] for _ in range(2000)], indent=4), "edge")

    # ndjson
    add("ndjson", "api records", "\n".join(json.dumps(r) for r in api)[:CAP])
    add("ndjson", "api records (minified)", "\n".join(json.dumps(r, separators=(",", ":")) for r in api)[:CAP])
    add("ndjson", "os.stat records", "\n".join(json.dumps(r) for r in stats)[:CAP])
    add("ndjson", "unicodedata records", "\n".join(json.dumps(r) for r in uni)[:CAP])
    add("ndjson", "unicodedata (utf-8)", "\n".join(json.dumps(r, ensure_ascii=False) for r in uni)[:CAP])
    add("ndjson", "dis records", "\n".join(json.dumps(r) for r in dis_rows)[:CAP])
    if pip_doc:
        add("ndjson", "pip inspect installed", "\n".join(json.dumps(r) for r in pip_doc["installed"])[:CAP])
    add("ndjson", "structured log lines", "\n".join(json.dumps({
        "ts": f"2026-03-01T12:{i // 60 % 60:02d}:{i % 60:02d}.{rng.randint(0, 999):03d}Z",
        "level": rng.choice(["info", "warn", "error"]), "logger": rng.choice(sorted(sys.stdlib_module_names)),
        "msg": rng.choice(["request done", "cache miss", "retrying upstream", "connection reset by peer"]),
        "trace_id": uuid.UUID(int=rng.getrandbits(128)).hex, "duration_ms": rng.randint(0, 9999)}) for i in range(4000))[:CAP])
    add("ndjson", "cjk records", "\n".join(json.dumps(r, ensure_ascii=False) for r in cjk)[:CAP], "edge")

    # csv
    add("csv", "api records", _csv(api))
    add("csv", "os.stat records", _csv(stats))
    add("csv", "unicodedata", _csv(uni))
    add("csv", "dis instructions", _csv(dis_rows))
    add("csv", "quoted text fields", "\n".join(",".join(f'"{" ".join(rng.sample(words, 4))}"' for _ in range(5))
                                              for _ in range(3000)))
    if pip_doc:
        meta = [r["metadata"] for r in pip_doc["installed"]]
        add("csv", "pip metadata", _csv([{"name": m["name"], "version": m["version"], "summary": m.get("summary", ""),
                                          "requires": ";".join(m.get("requires_dist", []))} for m in meta]))
    add("csv", "numeric ohlc", _numeric_csv(8000), "edge")
    add("csv", "float matrix", "\n".join(",".join(f"{rng.gauss(0, 1):.6f}" for _ in range(12)) for _ in range(4000)), "edge")
    add("csv", "single digits", "\n".join(",".join(str(rng.randint(0, 9)) for _ in range(20)) for _ in range(3000)), "edge")
    add("csv", "hex columns", "\n".join(",".join(rng.randbytes(8).hex() for _ in range(6)) for _ in range(3000)), "edge")
    add("csv", "numpy random test sets (hex)", _cat(_glob(f"{STDLIB}/site-packages/numpy/random/tests/data/*.csv")), "edge")
    add("csv", "cjk records", _csv(cjk), "edge")
    return c


def measure(corpora: list[Corpus]) -> list[dict]:
    count_o200k, count_cl100k = exact_tokenizer("o200k_base"), exact_tokenizer("cl100k_base")
    rows = []
    for corpus in corpora:
        estimate = estimate_tokens(corpus.text, corpus.kind)
        rows.append({**corpus._asdict(), "chars": len(corpus.text), "o200k": count_o200k(corpus.text),
                     "cl100k": count_cl100k(corpus.text), "estimate": estimate})
    return rows


def _summary(rows: list[dict]) -> None:
    print("\nestimate / real, per kind and scope (min over both encodings; median and max against o200k)")
    for kind in KINDS:
        for scope in ("typical", "edge", "out"):
            sel = [r for r in rows if r["kind"] == kind and r["scope"] == scope]
            if not sel:
                continue
            low = min(min(r["estimate"] / r["o200k"], r["estimate"] / r["cl100k"]) for r in sel)
            vs_o200k = sorted(r["estimate"] / r["o200k"] for r in sel)
            median = vs_o200k[len(sel) // 2]
            print(f"  {kind:7} {scope:8} n={len(sel):3d}  min {low:.2f}  median {median:.2f}  max {vs_o200k[-1]:.2f}")


def _binary_check() -> None:
    """Binary is priced at one token per byte: what its base64 text actually costs."""
    data = random.Random(1).randbytes(60_000)
    text = base64.b64encode(data).decode()
    for name in ("o200k_base", "cl100k_base"):
        real = exact_tokenizer(name)(text)
        print(f"binary: 60,000 random bytes, base64 = {real:,} {name} tokens ({real / len(data):.2f}/byte); "
              f"estimate {estimate_tokens(data, 'binary'):,}")


def _speed() -> None:
    code = _cat(sorted(STDLIB.glob("*.py")), cap=2_000_000)
    chinese = (CJK_ZH + MIXED) * 100
    print()
    for size in (100, 10_000, 1_000_000, 10_000_000):
        for label, base in (("ASCII code", code), ("Chinese", chinese)):
            text = (base * (size // len(base) + 1))[:size]
            n = max(3, min(2000, 20_000_000 // size))
            best = min(_timed(text, n) for _ in range(3))
            print(f"speed: {size:>10,} chars {label:10} {best * 1e6:10.1f} µs  ({best * 1e9 / size:5.2f} ns/char)")


def _timed(text: str, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        estimate_tokens(text)
    return (time.perf_counter() - start) / n


def main() -> None:
    rows = measure(build_corpora())
    print(f"{'kind':7} {'scope':8} {'corpus':42} {'chars':>8} {'o200k':>8} {'cl100k':>8} {'estimate':>8} "
          f"{'/o200k':>7} {'/cl100k':>7}")
    for r in rows:
        print(f"{r['kind']:7} {r['scope']:8} {r['name'][:42]:42} {r['chars']:8d} {r['o200k']:8d} {r['cl100k']:8d} "
              f"{r['estimate']:8d} {r['estimate'] / r['o200k']:7.2f} {r['estimate'] / r['cl100k']:7.2f}")
    _summary(rows)
    _binary_check()
    if "--speed" in sys.argv:
        _speed()


if __name__ == "__main__":
    main()
