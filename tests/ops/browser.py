"""Debian's headless chromium, driven over the DevTools protocol on loopback (test support).

Only ever pointed at loopback: the flags turn off every background fetch
(updates, sync, QUIC, field trials), and a fresh profile holds nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import shutil
import tempfile
from types import TracebackType
from typing import Any, Self

import aiohttp

CHROMIUM = shutil.which("chromium")
_LISTENING = re.compile(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/")

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


class Browser:
    """One headless chromium with one page; ``evaluate`` runs JavaScript in it."""

    def __init__(self) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="stall-chromium-")
        self._proc: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None
        self._socket: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._drain: asyncio.Task[bytes] | None = None

    async def __aenter__(self) -> Self:
        assert CHROMIUM is not None
        self._proc = await asyncio.create_subprocess_exec(
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={self._profile.name}",
            "about:blank",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        assert self._proc.stderr is not None
        async with asyncio.timeout(60):
            while True:
                line = (await self._proc.stderr.readline()).decode()
                if not line:
                    raise RuntimeError("chromium exited before its DevTools port was known")
                found = _LISTENING.search(line)
                if found:
                    break
        port = int(found.group(1))
        # Keep reading what chromium says, so a full pipe never stalls it.
        self._drain = asyncio.create_task(self._proc.stderr.read())
        self._session = aiohttp.ClientSession()
        async with asyncio.timeout(60):
            while True:
                async with self._session.get(f"http://127.0.0.1:{port}/json/list") as response:
                    pages = [t for t in await response.json() if t["type"] == "page"]
                if pages:
                    break
                await asyncio.sleep(0.05)
        self._socket = await self._session.ws_connect(
            pages[0]["webSocketDebuggerUrl"], max_msg_size=0
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._socket is not None:
            await self._socket.close()
        if self._session is not None:
            await self._session.close()
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await self._proc.wait()
        if self._drain is not None:
            await self._drain
        self._profile.cleanup()

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (an error raises)."""
        assert self._socket is not None
        ident = next(self._ids)
        await self._socket.send_str(json.dumps({"id": ident, "method": method, "params": params}))
        async with asyncio.timeout(60):
            while True:
                message = json.loads((await self._socket.receive()).data)
                if message.get("id") == ident:
                    break
        if "error" in message:
            raise RuntimeError(f"{method}: {message['error']}")
        result: dict[str, Any] = message["result"]
        return result

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page (None while it is loading)."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def until(self, expression: str, *, limit: float = 60) -> Any:
        """Evaluate ``expression`` until it is truthy; ``limit`` is a hang guard only."""
        async with asyncio.timeout(limit):
            while True:
                with contextlib.suppress(RuntimeError):  # a navigation in progress
                    value = await self.evaluate(expression)
                    if value:
                        return value
                await asyncio.sleep(0.05)
