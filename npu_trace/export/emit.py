"""Between the timeline's mapping and a writer: tracks described when first used, and a block's drawing put in order.

`Emitter` is the `TraceWriter` the mapping (`npu_trace.export.track_map`) calls: it describes a track to the
writer right before the first event on it, its groups first (a track made and never used is never described),
and numbers the tracks for the columnar drawing (`code`).

`Capture` stands in for the Emitter while a block is drawn as columns (`npu_trace.export.drawing`): the calls
the mapping makes for the rows drawn one by one are kept with the key of the row they belong to (`at`), so that
`flush` puts them among the block's columnar pieces (`npu_trace.export.pieces`) in key order: the order in
which drawing every row one by one calls the writer. Outside a block it passes every call straight on.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from npu_trace.export.tracks import Track, Value


class Emitter:
    """See the module docstring. `tracks`: every track made, by uuid (the mapping's `by_uuid`)."""

    def __init__(self, writer: Any, tracks: Mapping[int, Track]) -> None:
        self.writer = writer
        self.tracks = tracks
        self.by_code: List[Track] = []  # the columnar drawing's number of each track it used
        self._codes: Dict[int, int] = {}
        self.described: np.ndarray = np.zeros(64, dtype=bool)  # by code

    def code(self, track: Track) -> int:
        got = self._codes.get(track.uuid)
        if got is None:
            got = self._codes[track.uuid] = len(self.by_code)
            self.by_code.append(track)
            if got >= len(self.described):
                self.described = np.concatenate([self.described, np.zeros(len(self.described), dtype=bool)])
        return got

    def ensure(self, track: Track) -> None:
        """Describe the track (and the groups it sits in, outermost first) unless it was."""
        code = self.code(track)
        if self.described[code]:
            return
        if track.parent:
            self.ensure(self.tracks[track.parent])
        self.described[code] = True
        self.writer.track(track)

    # ---- TraceWriter ---------------------------------------------------------------------------------
    def header(self, info: Mapping[str, Any]) -> None:
        self.writer.header(info)

    def track(self, track: Track) -> None:
        self.ensure(track)

    def begin(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = (),
              flow_in: Sequence[int] = ()) -> None:  # fmt: skip
        self.ensure(track)
        self.writer.begin(track, ts, name, args, flow_out, flow_in)

    def end(self, track: Track, ts: int) -> None:
        self.ensure(track)
        self.writer.end(track, ts)

    def instant(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = ()) -> None:
        self.ensure(track)
        self.writer.instant(track, ts, name, args, flow_out)

    def counter(self, track: Track, ts: int, value: Value) -> None:
        self.ensure(track)
        self.writer.counter(track, ts, value)

    def close(self) -> Dict[str, int]:
        return dict(self.writer.close())


Call = Tuple[int, str, Tuple[Any, ...]]  # (key, method, arguments)


class Capture:
    """See the module docstring: `at(key)` sets the key of the calls that follow (each call of one key gets
    the next of its sub-keys: key + 0, + 1, ...); `calls` is what was kept; `keeping` is False outside a block
    (calls go straight to the emitter)."""

    def __init__(self, emitter: Emitter) -> None:
        self.emitter = emitter
        self.calls: List[Call] = []
        self.keeping = False
        self._key = 0

    def at(self, key: int) -> None:
        self._key = key

    def _keep(self, method: str, *args: Any) -> None:
        if not self.keeping:
            getattr(self.emitter, method)(*args)
            return
        self.calls.append((self._key, method, args))
        self._key += 1

    def header(self, info: Mapping[str, Any]) -> None:
        self.emitter.header(info)

    def track(self, track: Track) -> None:
        self._keep("track", track)

    def begin(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = (),
              flow_in: Sequence[int] = ()) -> None:  # fmt: skip
        self._keep("begin", track, ts, name, args, flow_out, flow_in)

    def end(self, track: Track, ts: int) -> None:
        self._keep("end", track, ts)

    def instant(self, track: Track, ts: int, name: str, args: Mapping[str, Any], flow_out: Sequence[int] = ()) -> None:
        self._keep("instant", track, ts, name, args, flow_out)

    def counter(self, track: Track, ts: int, value: Value) -> None:
        self._keep("counter", track, ts, value)

    def close(self) -> Dict[str, int]:
        return self.emitter.close()

    def replay(self, calls: Sequence[Call]) -> None:
        for _, method, args in calls:
            getattr(self.emitter, method)(*args)

    def take(self) -> List[Call]:
        calls, self.calls = self.calls, []
        return calls
