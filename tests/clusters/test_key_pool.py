"""The pool of keys made ahead of need: every key handed out is fresh and never handed out twice, and the
pool fills up again after it is drawn from, with CPU nothing else wants."""

from __future__ import annotations

import asyncio
import os
import threading

from herder.controllers.clusters.key_pool import KeyPool
from herder.talos import pki
from herder.talos.pki import KeyType


def _pem(key: pki.PrivateKey) -> bytes:
    return pki.encode_private_key(key)


async def test_keys_are_fresh_and_the_pool_refills() -> None:
    pool = KeyPool(3, KeyType.ECDSA_P256)
    first = await pool.take()  # made on the spot; the pool starts filling after it
    try:
        async with asyncio.timeout(10):
            while pool.ready < 3:  # noqa: ASYNC110 - the pool offers nothing to wait on
                await asyncio.sleep(0.01)
        # The spare keys are made at the lowest priority: only with CPU nothing else wants.
        makers = [t for t in threading.enumerate() if t.name.startswith("spare-keys")]
        assert makers and all(os.getpriority(os.PRIO_PROCESS, t.native_id or 0) == 19 for t in makers)
        taken = [first, *[await pool.take() for _ in range(5)]]  # three ready, two made on the spot
        assert len({_pem(k) for k in taken}) == 6
        assert all(pki.key_type_of(k) is KeyType.ECDSA_P256 for k in taken)
        async with asyncio.timeout(10):
            while pool.ready < 3:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        await pool.stop()


async def test_an_empty_pool_still_gives_keys() -> None:
    pool = KeyPool(0, KeyType.ECDSA_P256)
    assert pki.key_type_of(await pool.take()) is KeyType.ECDSA_P256
    assert pool.ready == 0
    await pool.stop()
