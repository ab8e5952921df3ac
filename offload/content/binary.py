"""Recognize binary formats by their leading signature bytes ("magic numbers").

A model cannot read binary content, so its reference carries facts instead: the format, and what the
header tells cheaply (image size, PDF version, ELF class). No byte of content is ever shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from offload.utf8 import char_boundary

__all__ = ["CONTROL_BYTES", "BinaryType", "describe_binary", "sniff_binary", "text_with_nuls"]

# Bytes that never appear in text: C0 controls except tab, LF, VT, FF, CR, backspace and ESC (ANSI colours).
CONTROL_BYTES = bytes(b for b in range(32) if b not in (8, 9, 10, 11, 12, 13, 27)) + b"\x7f"
_NUL_SAMPLE = 65536


@dataclass
class BinaryType:
    content_type: str
    description: str
    facts: dict = field(default_factory=dict)


# (offset, signature, MIME type, description); checked in order, so longer signatures come first.
_SIGNATURES: tuple[tuple[int, bytes, str, str], ...] = (
    (0, b"\x89PNG\r\n\x1a\n", "image/png", "PNG image"),
    (0, b"\xff\xd8\xff", "image/jpeg", "JPEG image"),
    (0, b"GIF87a", "image/gif", "GIF image"),
    (0, b"GIF89a", "image/gif", "GIF image"),
    (0, b"%PDF-", "application/pdf", "PDF document"),
    (0, b"\x1f\x8b", "application/gzip", "gzip compressed data"),
    (0, b"PK\x03\x04", "application/zip", "zip archive"),
    (0, b"PK\x05\x06", "application/zip", "zip archive (empty)"),
    (0, b"\x7fELF", "application/x-executable", "ELF executable"),
    (0, b"SQLite format 3\x00", "application/vnd.sqlite3", "SQLite database"),
    (0, b"\x00asm", "application/wasm", "WebAssembly module"),
    (0, b"\xfd7zXZ\x00", "application/x-xz", "xz compressed data"),
    (0, b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed", "7-zip archive"),
    (0, b"\x28\xb5\x2f\xfd", "application/zstd", "zstd compressed data"),
    (0, b"PAR1", "application/vnd.apache.parquet", "Parquet file"),
    (0, b"ARROW1", "application/vnd.apache.arrow.file", "Arrow IPC file"),
    (0, b"OggS", "audio/ogg", "Ogg media"),
    (0, b"fLaC", "audio/flac", "FLAC audio"),
    (0, b"ID3", "audio/mpeg", "MP3 audio"),
    (0, b"wOFF", "font/woff", "WOFF font"),
    (0, b"wOF2", "font/woff2", "WOFF2 font"),
    (0, b"II*\x00", "image/tiff", "TIFF image"),
    (0, b"MM\x00*", "image/tiff", "TIFF image"),
    (0, b"8BPS", "image/vnd.adobe.photoshop", "Photoshop image"),
    (0, b"\xcf\xfa\xed\xfe", "application/x-mach-binary", "Mach-O executable (64-bit)"),
    (0, b"\xce\xfa\xed\xfe", "application/x-mach-binary", "Mach-O executable (32-bit)"),
    (257, b"ustar", "application/x-tar", "tar archive"),
)


def sniff_binary(data: bytes) -> BinaryType | None:
    """The binary type of `data`, or None when it may be text."""
    for offset, signature, content_type, description in _SIGNATURES:
        if data.startswith(signature, offset):
            found = BinaryType(content_type, description)
            _add_facts(found, data)
            return found
    riff = data[8:12] if data.startswith(b"RIFF") else b""
    if riff in (b"WEBP", b"WAVE", b"AVI "):
        kind = {b"WEBP": ("image/webp", "WebP image"), b"WAVE": ("audio/wav", "WAV audio"),
                b"AVI ": ("video/x-msvideo", "AVI video")}[riff]
        return BinaryType(*kind)
    if data[4:8] == b"ftyp":
        brand = data[8:12]
        if brand in (b"heic", b"heix", b"mif1"):
            return BinaryType("image/heic", "HEIC image")
        if brand == b"avif":
            return BinaryType("image/avif", "AVIF image")
        return BinaryType("video/mp4", "MP4/QuickTime media")
    if data.startswith(b"\xca\xfe\xba\xbe"):
        # Shared by Java classes and Mach-O fat binaries; a fat binary counts its architectures here.
        if int.from_bytes(data[4:8], "big") < 40:
            return BinaryType("application/x-mach-binary", "Mach-O universal binary")
        return BinaryType("application/java-vm", "Java class file")
    if data.startswith(b"BZh") and data[3:4].isdigit():
        return BinaryType("application/x-bzip2", "bzip2 compressed data")
    if data.startswith(b"MZ") and b"\x00" in data[:64]:
        return BinaryType("application/vnd.microsoft.portable-executable", "Windows/DOS executable")
    if data.startswith(b"\x00\x00\x01\x00") and len(data) > 6 and data[4] > 0:
        return BinaryType("image/x-icon", "ICO image")
    if b"\x00" in data[:8192]:
        # NUL bytes: UTF-16 text, any binary format without a signature listed above, or text all the
        # same (names that `find -print0` separates, a log with a stray NUL).
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            return BinaryType("application/octet-stream", "UTF-16 text (not decoded)")
        if not text_with_nuls(data[:char_boundary(data, _NUL_SAMPLE)]):
            return BinaryType("application/octet-stream", "unknown format")
    return None


def text_with_nuls(sample: bytes) -> bool:
    """Whether content holding NUL bytes is text: valid UTF-8 with next to no other control bytes, and
    its NULs single separators, as `find -print0` and `xargs -0` write them.

    Binary formats pad with runs of NULs and hold control bytes and invalid UTF-8; UTF-16 text of
    Latin letters has a NUL in every other byte (the separated "names" would be one letter long).
    """
    nuls = sample.count(0)
    if 3 * nuls > len(sample) or b"\x00\x00\x00" in sample:
        return False
    replaced = sample.decode("utf-8", "replace").count("\ufffd")
    controls = len(sample) - len(sample.translate(None, CONTROL_BYTES)) - nuls
    return replaced <= len(sample) // 200 and controls <= len(sample) // 200


def describe_binary(data: bytes, content_type: str) -> BinaryType:
    """Facts for a result already known to be binary."""
    return sniff_binary(data) or BinaryType(content_type, "unknown format")


def _add_facts(found: BinaryType, data: bytes) -> None:
    facts = found.facts
    if found.content_type == "image/png" and data[12:16] == b"IHDR":
        facts["width"] = int.from_bytes(data[16:20], "big")
        facts["height"] = int.from_bytes(data[20:24], "big")
    elif found.content_type == "image/gif" and len(data) >= 10:
        facts["width"] = int.from_bytes(data[6:8], "little")
        facts["height"] = int.from_bytes(data[8:10], "little")
    elif found.content_type == "image/jpeg":
        size = _jpeg_size(data)
        if size:
            facts["width"], facts["height"] = size
    elif found.content_type == "application/pdf":
        version = data[5:8].decode("ascii", "replace")
        if len(version) == 3 and version[1] == ".":
            facts["version"] = version
    elif found.content_type == "application/x-executable" and len(data) > 5:
        facts["class"] = {1: "32-bit", 2: "64-bit"}.get(data[4], "unknown class")
        found.description = f"ELF {facts['class']} executable"


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Walk the JPEG segments up to the first start-of-frame marker, which holds the size."""
    position, end = 2, min(len(data), 1 << 20)
    while position + 9 < end:
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            position += 2
            continue
        length = int.from_bytes(data[position + 2:position + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height = int.from_bytes(data[position + 5:position + 7], "big")
            width = int.from_bytes(data[position + 7:position + 9], "big")
            return width, height
        position += 2 + length
    return None
