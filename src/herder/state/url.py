"""Open a store from a URL: ``memory://``, ``sqlite:///PATH`` or ``etcd://HOST:PORT[,HOST:PORT…][/PREFIX]``."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from herder.resources import KindRegistry
from herder.state.backend import Backend
from herder.state.encryption import Cipher
from herder.state.store import Store

KEY_FILE = "encryption.key"


async def open_backend(url: str) -> Backend:
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    match parts.scheme:
        case "memory":
            from herder.state.memory import MemoryBackend

            return MemoryBackend()
        case "sqlite":
            from herder.state.sqlite import SQLiteBackend

            path = parts.path if not parts.netloc else parts.netloc + parts.path
            if not path:
                raise ValueError(
                    f"{url}: a sqlite URL needs a path, as in sqlite:///var/lib/herder/herder.db"
                )
            return await SQLiteBackend(path, synchronous=query.get("synchronous", "FULL")).open()
        case "etcd":
            from herder.state.etcd import EtcdBackend

            endpoints = [e for e in parts.netloc.split(",") if e]
            if not endpoints:
                raise ValueError(f"{url}: an etcd URL needs at least one HOST:PORT")
            return await EtcdBackend(endpoints, prefix=parts.path.rstrip("/") or "/herder").open()
        case _:
            raise ValueError(
                f"unsupported state URL {url!r}: use memory://, sqlite:///PATH or etcd://HOST:PORT"
            )


async def open_store(
    url: str, registry: KindRegistry, *, key_file: str | Path | None = None, key: bytes | None = None
) -> Store:
    """Open the backend of ``url`` and start a store on it.

    Sensitive kinds are sealed with ``key``, or with the key in ``key_file`` (created on first use).
    """
    cipher = Cipher(key) if key is not None else Cipher.from_file(key_file) if key_file is not None else None
    backend = await open_backend(url)
    return await Store(backend, registry, cipher=cipher).start()
