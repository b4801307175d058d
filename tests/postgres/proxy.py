"""A loopback TCP proxy in front of PostgreSQL that can turn into a black hole.

``freeze()`` keeps every connection open but forwards nothing more, in either
direction: what a network partition or a frozen server looks like to a
client (no RST, no FIN, just silence). ``thaw()`` forwards again.
``withheld(marker)`` returns once a client's bytes holding ``marker``
reached the frozen proxy: the event that shows a call is waiting on the
silent server (``b"BEGIN"``: a transaction is), no sleep needed.
"""

from __future__ import annotations

import asyncio
import os
from types import TracebackType
from typing import Self
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


class BlackHoleProxy:
    """Forward 127.0.0.1:<port> to the server named in ``dsn``, until frozen."""

    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        query = dict(parse_qsl(parts.query))
        socket_dir = query.pop("host", "")
        # The embedded server listens on a Unix socket (?host=/dir); others on TCP.
        self._socket = (
            os.path.join(socket_dir, f".s.PGSQL.{parts.port or 5432}")
            if socket_dir.startswith("/")
            else None
        )
        self._dsn = parts._replace(query=urlencode(query))
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._open = asyncio.Event()
        self._open.set()
        # What clients sent since the last freeze(), held back; a change wakes withheld().
        self._withheld = bytearray()
        self._arrived = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # Every stream, closed on exit: a pipe task cancelled before it first runs
        # never reaches its own close.
        self._writers: list[asyncio.StreamWriter] = []
        self._closed = False

    @property
    def dsn(self) -> str:
        """The DSN that reaches the server through this proxy."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        password = f":{self._dsn.password}" if self._dsn.password else ""
        user = f"{self._dsn.username}{password}@" if self._dsn.username else ""
        netloc = f"{user}127.0.0.1:{port}"
        return urlunsplit(self._dsn._replace(netloc=netloc))

    def freeze(self) -> None:
        self._withheld.clear()
        self._open.clear()

    def thaw(self) -> None:
        self._open.set()

    async def withheld(self, marker: bytes = b"") -> None:
        """Return once the bytes held back since the last ``freeze()`` contain ``marker``."""
        async with self._arrived:
            await self._arrived.wait_for(lambda: bool(self._withheld) and marker in self._withheld)

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._closed = True
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        if self._socket is not None:
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(self._socket)
        else:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        self._writers.append(upstream_writer)
        if self._closed:  # the proxy closed while this connection was being made
            writer.close()
            upstream_writer.close()
            return
        for source, sink, from_client in (
            (reader, upstream_writer, True),
            (upstream_reader, writer, False),
        ):
            task = asyncio.create_task(self._pipe(source, sink, from_client=from_client))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, from_client: bool
    ) -> None:
        try:
            while chunk := await source.read(65536):
                if from_client and not self._open.is_set():
                    self._withheld += chunk
                    async with self._arrived:
                        self._arrived.notify_all()
                await self._open.wait()
                sink.write(chunk)
                await sink.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            sink.close()
