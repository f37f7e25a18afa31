"""The closed records of the ledger folded into GPU-seconds (binder.ledgertotals): one
paged list of the ledger namespace's closed records, then a watch of records entering
that selection from the list's resourceVersion, each added once, none kept. Every
replica runs it, so each exports the counters, and a leader change moves nothing.
"""

from __future__ import annotations

import asyncio
import logging

from gpu_binder.api.types import CLOSED_RECORDS, GPUUsageRecord
from gpu_binder.binder import LedgerTotals
from gpu_binder.client.errors import Gone
from gpu_binder.client.interface import Client

log = logging.getLogger(__name__)


async def fold(client: Client, namespace: str, totals: LedgerTotals, backoff: float = 1.0) -> None:
    """Keep totals.closed as the ledger's closed records say, until cancelled."""
    delay = backoff
    while True:
        try:
            totals.restart()
            listed = await client.list(GPUUsageRecord, namespace, label_selector=CLOSED_RECORDS)
            for rec in listed.items:
                totals.count(rec)
            totals.loaded = True
            rv = listed.resource_version
            delay = backoff
            while True:
                stream = client.watch(
                    GPUUsageRecord, namespace, resource_version=rv, label_selector=CLOSED_RECORDS
                )
                try:
                    async for event in stream:
                        rv = event.object.metadata.resource_version or rv
                        # ADDED: a record entering the selection, closed now. A closed
                        # record changes no more (a relabel is MODIFIED): counted once.
                        if event.type == "ADDED":
                            totals.count(event.object)
                finally:
                    aclose = getattr(stream, "aclose", None)
                    if aclose is not None:
                        await aclose()
        except asyncio.CancelledError:
            raise
        except Gone:
            log.info("watch of closed usage records expired: reading them again")
        except Exception as e:
            log.warning("reading closed usage records: %r; retrying in %.1fs", e, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
