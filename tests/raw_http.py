"""HTTP/1.1 requests written byte for byte over a real socket to 127.0.0.1.

aiohttp's and requests' clients refuse to send a header that is not text (bytes that are
not UTF-8, control characters), which is exactly what a hostile caller sends; this writes
whatever bytes a test gives and reads the answer's status, headers and body.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def request(
    url: str, method: bytes, target: bytes, headers: list[bytes], body: bytes = b""
) -> Answer:
    """Send one request (``Connection: close``) to the server at ``url``; its answer."""
    parts = urlsplit(url)
    assert parts.hostname in ("127.0.0.1", "::1"), "raw requests go to loopback only"
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        head = [method + b" " + target + b" HTTP/1.1", b"Host: " + parts.netloc.encode()]
        head += [*headers, b"Connection: close", b"Content-Length: " + str(len(body)).encode()]
        writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
        await writer.wait_closed()
    top, _, rest = raw.partition(b"\r\n\r\n")
    status_line, *lines = top.decode("latin-1").split("\r\n")
    fields = {}
    for line in lines:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    if fields.get("transfer-encoding") == "chunked":
        rest = _unchunk(rest)
    return Answer(int(status_line.split()[1]), fields, rest)


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out
