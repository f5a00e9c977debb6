"""The agent's shipper (`agent --ship s3://BUCKET/PREFIX`): every finished dump in the spool uploaded to
`PREFIX/HOST/DUMP`, on a thread of its own, the spool as the buffer.

A dump is shipped once its upload returned; then the empty file `.DUMP.shipped` beside it says so
(npu_trace.sinks.flight.dumps.shipped_mark), and only then may the spool's retention remove it (`removable`):
while the store is down nothing is lost, the spool holds every unshipped dump, over its bound if need be. A
failed upload is counted (`errors`) and tried again after a backoff that doubles from `BACKOFF_S` up to
`BACKOFF_MAX_S`, the dumps in time order. The same key every time: an upload whose answer was lost and that is
tried again puts the same bytes at the same key (the dump arrives once). At start the spool is scanned: the
dumps an earlier run left unshipped go first. `wake()` (a dump was written) ships without waiting for the next
scan; `stop()` tries what is left once more within `FINAL_S`, then says what stays unshipped (it ships at the
next start).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from npu_trace.cluster.store import Location, client, upload
from npu_trace.sinks.flight.dumps import is_dump, shipped_mark

SCAN_S = 5.0
BACKOFF_S = 1.0
BACKOFF_MAX_S = 60.0
FINAL_S = 10.0


class Shipper:
    def __init__(self, spool: str, where: Location, host: str, on_note: Callable[[str], None] = lambda _t: None,
                 s3: Optional[Any] = None, backoff_s: float = BACKOFF_S, scan_s: float = SCAN_S) -> None:  # fmt: skip
        self.spool, self.where, self.host, self.on_note = spool, where, host, on_note
        self.s3 = s3 if s3 is not None else client()
        self.backoff_s, self.scan_s = backoff_s, scan_s
        self.shipped = 0
        self.errors = 0
        self.failing = 0  # consecutive failures (the backoff's exponent)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # ---- what retention asks ------------------------------------------------------------------------------
    def removable(self, name: str) -> bool:
        return os.path.exists(os.path.join(self.spool, shipped_mark(name)))

    def pending(self) -> List[str]:
        """The finished dumps not shipped yet, oldest first."""
        try:
            names = os.listdir(self.spool)
        except OSError:
            return []
        return sorted(n for n in names if is_dump(n) and not self.removable(n))

    # ---- the thread ----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="npu-trace-ship", daemon=True)
        self._thread.start()

    def wake(self, _path: str = "") -> None:
        self._wake.set()

    def stop(self) -> None:
        """Stop the thread; what is left tried once more (within FINAL_S); what stays unshipped said."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=FINAL_S + 5)
        deadline = time.monotonic() + FINAL_S
        self.ship_pending(deadline)
        left = self.pending()
        if left:
            self.on_note(f"ship: {len(left)} dump(s) not shipped to {self.where.url()}: they stay in {self.spool} "
                         "and ship at the next start")  # fmt: skip

    def _run(self) -> None:
        while not self._stop.is_set():
            ok = self.ship_pending()
            wait = self.scan_s if ok else min(BACKOFF_MAX_S, self.backoff_s * 2 ** max(0, self.failing - 1))
            self._wake.wait(wait)
            if ok or self._stop.is_set():
                self._wake.clear()

    def ship_pending(self, deadline: Optional[float] = None) -> bool:
        """Upload every pending dump in time order; False at the first failure (the rest waits for the retry)."""
        for name in self.pending():
            if deadline is not None and time.monotonic() > deadline:
                return False
            if not self.ship(name):
                return False
        return True

    def ship(self, name: str) -> bool:
        path = os.path.join(self.spool, name)
        try:
            key = upload(self.s3, self.where, self.host, path)
        except FileNotFoundError:  # removed meanwhile (by hand): nothing to ship
            return True
        except Exception as exc:  # botocore's errors (refused, timed out, denied): counted, said, retried
            self.errors += 1
            self.failing += 1
            if self.failing == 1 or self.failing % 10 == 0:
                self.on_note(f"ship: {name} to {self.where.url()} failed ({type(exc).__name__}: {exc}); "
                             f"retrying with backoff ({self.failing} failure(s) in a row)")  # fmt: skip
            return False
        with open(os.path.join(self.spool, shipped_mark(name)), "w"):
            pass
        self.shipped += 1
        if self.failing:
            self.on_note(f"ship: the store answers again after {self.failing} failure(s)")
        self.failing = 0
        self.on_note(f"ship: {name} -> s3://{self.where.bucket}/{key}")
        return True

    def figures(self) -> Dict[str, float]:
        return {"shipped_total": self.shipped, "ship_errors_total": self.errors, "ship_pending": len(self.pending())}
