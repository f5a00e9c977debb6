"""The simulated NPU: a native executor whose functions carry Ascend HAL / driver names, probed with uprobes.

ABI of the executor (npu_sim.c, built on demand by `build.ensure_built()`; all functions are exported,
noinline real call sites; HAL calls inject their latency inside the call and return what the plan says):

    int  halMemAlloc(u32 dev, u64 size, u64 flag)                       0 or 6 (out of memory)
    int  halMemFree(u32 dev, u64 va)
    int  halSqTaskSend(u32 dev, u32 ts, u32 stream, u32 task)
    int  halCqReportRecv(u32 dev, u32 ts, u32 stream, s32 timeout_ms)  count or -110
    void devmm_alloc_done(u32 dev, u64 size, u64 va, s32 ret, u64 free_bytes, u64 largest_free)
    void trs_logic_cq_enque(u32 dev, u32 stream, u32 task, u32 errcode)
    void irq_handler_entry(u32 dev, u32 irq, const char *name)
    void irq_handler_exit(u32 dev, u32 irq, s32 ret)
    void drv_timeout(u32 dev, u32 kind, u32 chan, u64 wait_us)  kind: 1 cq_wait 2 mbox 3 dma 4 msg_chan
    void hb_report_heart_beat_lost_event(u32 dev, u32 lost_count)
    void dms_event_report(u32 dev, u32 event_id, u32 ce_count, u32 uce_count, s32 temp_c)
    void devdrv_reset_step(u32 dev, u32 step, const char *step_name, s32 ret)

The executor also exports `npu_sim_hal_abi()`, the marker by which npu_trace.bpf.abi gives it this ABI. Its
`-H LIB` mode sends the HAL actions to LIB instead: the simulator's libascend_hal.so (hal_real.c, built by
`build.ensure_hal_library()`), whose four functions have the real driver's prototypes (docs/hal-abi.md).

Events (group `ascend`): `ascend_<function>` on entry with one field per parameter (names/types in abi.FUNCS),
and `ascend_<hal>_ret` (field `ret`) for the four HAL calls. Plan/output file formats: see runner.py.

Python API:
    load(fs) -> LoadedSim; unload(fs) -> int; is_loaded(fs) -> bool
    start_scenario(name, seed, duration_s, rate, devices, truth_path=None) -> ScenarioRun (.wait() -> truth)
    run_scenario(name, seed, duration_s, rate, devices, truth_path=None) -> truth dict
    Both take `hal_lib=PATH`: the HAL calls go through the real-ABI library at PATH (`npu-sim -H`), as an
    application calls the driver's libascend_hal.so; `hal_install` puts it where the driver installs its own.
    Both take `channels=SideChannels(...)` to run the side channels next to the executor (kmsg lines,
    synthetic uevents, a fake npu-smi: npu_trace.sim.side_channels); without it only the executor runs.
    Both take `host=Host(...)`: the executor's threads and CPU moves (npu_trace.sim.threads). HOST_LIKE (the
    default) behaves like a real host: application threads,
    completions in an interrupt thread on another CPU than their submit, calls that change CPU between entry
    and return, and every thread but the interrupt one moved to another CPU every 2 ms; SINGLE runs every action
    on one thread (the executor of old).
"""

from __future__ import annotations

from typing import Optional

from npu_trace.device.hal import RESET_STEPS, event_names
from npu_trace.ftrace.tracefs import Tracefs
from npu_trace.sim.probes import LoadedSim, is_loaded, load, unload
from npu_trace.sim.runner import ScenarioRun, Truth, expected_events
from npu_trace.sim.scenarios import SCENARIOS
from npu_trace.sim.side_channels import SideChannels
from npu_trace.sim.threads import HOST_LIKE, SINGLE, Host

__all__ = [
    "HOST_LIKE",
    "RESET_STEPS",
    "SCENARIOS",
    "SINGLE",
    "Host",
    "LoadedSim",
    "ScenarioRun",
    "SideChannels",
    "Truth",
    "event_names",
    "expected_events",
    "is_loaded",
    "load",
    "run_scenario",
    "start_scenario",
    "unload",
]


def start_scenario(
    name: str,
    seed: int,
    duration_s: float,
    rate: float,
    devices: int,
    truth_path: Optional[str] = None,
    ensure_loaded: bool = True,
    fs: Optional[Tracefs] = None,
    channels: Optional[SideChannels] = None,
    host: Host = HOST_LIKE,
    hal_lib: Optional[str] = None,
) -> ScenarioRun:
    """Start the executor without waiting (loading the uprobes first unless `ensure_loaded` is False); with
    `hal_lib`, its HAL calls go through that real-ABI library (the installed one: `hal_install`)."""
    from npu_trace.sim import runner
    from npu_trace.sim.scenarios import validate

    validate(name, duration_s, rate, devices, host)  # before the uprobes are loaded: a bad value changes nothing
    binary = None
    if ensure_loaded:
        binary = load(fs or Tracefs.find()).binary
    return runner.start(name, seed, duration_s, rate, devices, truth_path, binary, channels, host, hal_lib)


def run_scenario(
    name: str,
    seed: int,
    duration_s: float,
    rate: float,
    devices: int,
    truth_path: Optional[str] = None,
    ensure_loaded: bool = True,
    fs: Optional[Tracefs] = None,
    channels: Optional[SideChannels] = None,
    host: Host = HOST_LIKE,
    hal_lib: Optional[str] = None,
) -> Truth:
    """Run a scenario to completion and return its ground truth (also written to `truth_path` if given)."""
    run = start_scenario(name, seed, duration_s, rate, devices, truth_path, ensure_loaded, fs, channels, host,
                         hal_lib)  # fmt: skip
    try:
        return run.wait()
    except BaseException:
        run.terminate()
        raise
