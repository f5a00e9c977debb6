"""The live source: a tracefs session read raw, recorded when asked, decoded per CPU for the analysis.

It lives in the worker process (`tui.worker`): the session's instance is created, read and removed there.
Each batch of raw pages goes to the Recorder (when recording) and to the timeline, which decodes it and puts
it in time order with the channels' events: what is recorded is exactly what was analysed. Recording
starts/stops at the next poll (the UI's request only sets a flag).

`live_source(options)` and `demo_source(...)` are the factories a `SourceSpec` names (built in the worker from
the `TraceOptions` the UI sent). The session's scope (npu_trace.pipeline.scope) is applied by the kernel where
it can be; `scope_filter` is the pipeline's part, applied by the analysis (the feed's collector).
"""

from __future__ import annotations

import time
from typing import Callable, List, Optional, Tuple

from npu_trace import sim
from npu_trace.device.profiles import Profile, get_profile
from npu_trace.errors import NpuTraceError, RecordingError, SourceError
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.pipeline import Batch, pump
from npu_trace.pipeline.blocktimeline import LiveBlocks
from npu_trace.pipeline.scope import ScopeFilter
from npu_trace.process import StopFlag
from npu_trace.sim.cycle import CyclePlan, ScenarioCycle
from npu_trace.sim.side_channels import SideChannels
from npu_trace.sinks.flight.flight_recorder import FlightRecorder, FlightSettings
from npu_trace.sinks.npt_sink import Recorder
from npu_trace.sources.comm import CommCache, saved_comms
from npu_trace.sources.host_channels import Channels
from npu_trace.sources.live_trace import LiveTrace
from npu_trace.sources.options import TraceOptions
from npu_trace.sources.tracefs_source import TracefsSession
from tui.worker.feed import UpdateSink
from tui.worker.sources import BaseSource

LOSS_EVERY_S = 1.0
FLIGHT_S = 300.0  # what `d` dumps: the last five minutes ...
FLIGHT_BYTES = 64 << 20  # ... within this much memory


class LiveSource(BaseSource):
    label = "live"

    def __init__(
        self,
        session: TracefsSession,
        profile: Profile,
        *,
        until: Optional[Callable[[], bool]] = None,
        label: str = "live",
        channels: Optional[Channels] = None,
        driver: Optional[ScenarioCycle] = None,
    ) -> None:
        super().__init__()
        self.session = session
        self.channels = channels  # kmsg, uevents, npu-smi, bpf: their events are analysed and recorded too
        self.note = ""
        if channels is not None:
            channels.on_note = self._note  # never on the terminal: the UI owns it
        self.ledger = session.ledger
        self.profile = profile
        self.driver = driver  # the demo's scenarios: polled with the reads, stopped with the session
        self.until = until if driver is None else driver.poll
        self.label = label
        self.recorder: Optional[Recorder] = None
        self.flight: Optional[FlightRecorder] = None  # the last minutes, for `d` (made once the session runs)
        self.flight_settings = FlightSettings(FLIGHT_S, ".", FLIGHT_BYTES, dump_on=())  # manual dumps only
        self.error = ""
        self._want: Optional[str] = None
        self._stop_rec = False
        self._loss_at = 0.0
        self._comms = CommCache(lambda: saved_comms(self.session.fs))
        self.scope_filter = ScopeFilter(session.scope, self._comms)  # its kernel part is known once started

    # ---- controls ------------------------------------------------------------------------------
    def mark(self, text: str) -> bool:
        inst = self.session.instance
        if inst is None:
            return False
        try:
            inst.write_marker(text)
        except SourceError as exc:
            self.error = f"marker: {exc}"
            return False
        return True

    def start_recording(self, path: str) -> bool:
        self._want, self._stop_rec = path, False
        return True

    def stop_recording(self) -> bool:
        self._stop_rec = True
        return self.recorder is not None or self._want is not None

    def recording(self) -> Optional[Tuple[str, int]]:
        rec = self.recorder
        return None if rec is None else (rec.files[-1], rec.bytes_written)

    def dump_now(self, directory: str) -> Optional[str]:
        """The flight ring's last minutes to a recording in `directory` now: its path; a RecordingError when
        the directory cannot be written or the dump failed (the UI says it)."""
        flight = self.flight
        if flight is None:
            return None
        flight.set_directory(directory)
        path = flight.dump_now()
        if path is None:
            raise RecordingError("nothing to dump yet" if not flight.errors else "the dump failed (see the notes)")
        return path

    def comm(self, pid: int) -> str:
        return self._comms(pid)

    def detail(self) -> str:
        if self.error:
            return self.error
        if self.driver is not None and self.driver.status:
            return self.driver.status + (f"; {self.note}" if self.note else "")
        return self.note or f"instance {self.session.name}"

    def _note(self, text: str) -> None:
        self.note = text

    # ---- worker --------------------------------------------------------------------------------
    def run(self, sink: UpdateSink, stop: StopFlag) -> None:
        with LiveTrace(self.session, self.channels) as source:
            self.scope_filter.set_scope(self.session.scope)
            sink.begin(self.session.task_snapshot)
            if self.session.notes:
                self.note = self.session.notes[-1]
            fs = self.session.fs
            if fs is not None:  # should this process die without removing it, the UI will
                sink.announce({"tracefs": fs.root, "instance": self.session.name,
                               "switch_state": self.session.switches.state.directory})  # fmt: skip
            blocks = LiveBlocks(source.block_timeline(), time.monotonic)
            self.flight = self._flight_recorder()
            try:
                pump(source, lambda batch: self._batch(batch, blocks, sink), stop=stop, until=self.until)
            finally:
                if self.driver is not None:
                    self.driver.terminate()
                self._close_recorder()

    def _flight_recorder(self) -> Optional[FlightRecorder]:
        """The ring `d` dumps from; without it (its directory cannot be written) the session goes on, said."""
        extra = {"channels": self.channels.header()} if self.channels is not None else {}
        try:
            return FlightRecorder(self.session, self.flight_settings, self.profile.name, extra=extra,
                                  on_note=self._note)  # fmt: skip
        except NpuTraceError as exc:
            self.note = f"flight recorder off: {exc}"
            return None

    def _batch(self, batch: Batch, blocks: LiveBlocks, sink: UpdateSink) -> None:
        self._apply_recording()
        if self.recorder is not None:
            self.recorder(batch)
        if self.flight is not None:
            self.flight(batch)
        block = blocks.push(batch)
        now = time.monotonic()
        if now - self._loss_at >= LOSS_EVERY_S:
            self._loss_at = now
            self.session.update_loss()
        if block is None:
            sink([])  # nothing taken this read: the UI's requests are still served
        else:
            sink(block, blocks.timeline.now)

    def _apply_recording(self) -> None:
        if self._stop_rec:
            self._stop_rec, self._want = False, None
            self._close_recorder()
        if self._want is not None:
            path, self._want = self._want, None
            self._close_recorder()
            try:
                extra = {"channels": self.channels.header()} if self.channels is not None else {}
                self.recorder = Recorder(self.session, path, self.profile.name, extra=extra)
                self.error = ""
            except (NpuTraceError, OSError) as exc:
                self.error = f"recording: {exc}"

    def _close_recorder(self) -> None:
        rec, self.recorder = self.recorder, None
        if rec is not None:
            rec.close()


def live_source(options: TraceOptions, tracefs_root: Optional[str] = None) -> LiveSource:
    """`npu-trace live`'s source, from the options the UI checked (`tracefs_root`: that mount, else found)."""
    notes: List[str] = []
    fs = Tracefs(tracefs_root) if tracefs_root else None
    source = LiveSource(options.make_session(fs), options.profile, channels=options.make_channels(notes.append))
    if notes:
        source.note = notes[-1]
    return source


def demo_source(tracefs_root: str, label: str, options: TraceOptions, plan: Optional[CyclePlan] = None
                ) -> LiveSource:  # fmt: skip
    """`npu-trace demo`'s source: the simulator's events on a session of their own, with the channels that
    read its kmsg lines, uevents and fake npu-smi (`options`: npu_trace.commands.demo.demo_options); with
    `plan`, it runs the simulator's scenarios one after another itself (started once the session reads, stopped
    when it ends) and says which one runs."""
    session = options.make_session(Tracefs(tracefs_root))
    cycle = None if plan is None else ScenarioCycle(plan, sim.start_scenario, SideChannels())
    return LiveSource(session, options.profile, label=label, channels=options.make_channels(), driver=cycle)


def session_source(events: List[str], tracefs_root: str, profile_name: str, tag: str = "") -> LiveSource:
    """A session on exactly `events` (tests; `tag` names the instance)."""
    profile = get_profile(profile_name)
    fs = Tracefs(tracefs_root)
    return LiveSource(TracefsSession(events, fs=fs, layouts=profile.layouts, tag=tag), profile)
