"""kmsg rules as data: the real Ascend driver's message templates (hicann/driver, see the reference's §5).

Each rule is a dict:
    text     the literal head of the message (after the `[ascend] ... <ctx> ` prefix), matched with startswith
    module   the module tag the line must carry ("" = any); the same text may mean different things per module
    kind     the NpuEvent kind (timeout, reset_step, link, alloc_fail, ecc, fault, log)
    op       the operation name within the kind
    step     reset_step only: the step name (the simulator's `RESET_STEPS` names where the real step corresponds)
    dev      field names holding the device id, tried in order (default `DEV_FIELDS`)
    set      constant args added to the event ({"ret": -1} marks a failed/refused reset step)
    contains a substring the message must also hold (rules for lines without the `[ascend]` prefix: module "kernel")
    extract  a bounded regex whose named groups become fields (templates that are not `key=value`)

Rules are tried in order; the first whose module and text match wins. A line with the `[ascend]` prefix and no
rule is kind "log" (op "ascend:<module>"). Real templates, verbatim format strings, with their source lines, are
in tests/data/kmsg/templates.txt.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

DEV_FIELDS: Tuple[str, ...] = ("dev_id", "device_id", "devid", "udevid", "index_id", "main_dev_id", "dev_phy_id")
RATELIMIT_FUNC = "log_to_printk_and_ringbuf"  # its "N callbacks suppressed" lines are lost driver messages
FAILED = {"ret": -1}

Rule = Dict[str, Any]
_BUS = r"^Bus (?P<bus>[\w:.]{1,64}) link"


def _r(kind: str, op: str, text: str, module: str = "", **kw: Any) -> Rule:
    return {"kind": kind, "op": op, "text": text, "module": module, **kw}


def _step(step: str, text: str, module: str = "drv_pcie", **kw: Any) -> Rule:
    return _r("reset_step", "reset", text, module, step=step, **kw)


HEARTBEAT: List[Rule] = [
    _r("timeout", "heartbeat", "Heartbeat lost!", "drv_soft_fault"),
    _r("timeout", "heartbeat", "The device urgent heartbeat is lost!", "dms_module", dev=["device"], set={"urgent": 1}),
    _r("timeout", "heartbeat", "Device heart beat lost, stop all msg send.", ""),
    _r("log", "heartbeat_wq_destroyed", "Heart beat lost workqueue has been destroyed.", "drv_soft_fault"),
    _r("log", "heartbeat_report_failed", "report heart beat lost event failed.", "drv_soft_fault"),
    _r("log", "soft_fault_report_failed", "Soft fault report failed!", "drv_soft_fault", dev=["device"]),
    _r("log", "heartbeat_broken", "Heartbeat broken, stop message send.", "drv_pcie"),
    _step("heartbeat_resume", "Heartbeat already initialized, just start it.", "drv_soft_fault"),
    _r("timeout", "heartbeat_miss_read", "miss read heart beat over", ""),
    _r("log", "heartbeat_debug", "heart beat debug info.", ""),
]

TIMEOUTS: List[Rule] = [
    _r("timeout", "mbox", "Mbox wait fail.", "trs_drv"),
    _r("timeout", "mbox_unavailable", "Mbox chan not available.", "trs_drv"),
    _r("timeout", "msg_chan", "Message send finish, no resp.", "drv_pcie"),
    _r("log", "msg_process_failed", "Message send finish, process failed.", "drv_pcie"),
    _r("log", "msg_no_process_cb", "Message send finish, no process cb.", "drv_pcie"),
    _r("log", "msg_invalid_para", "Message send finish, invalid para.", "drv_pcie"),
    _r("timeout", "dma", "Time out.", "drv_pcie"),
    _r("timeout", "dma", "Wait timeout.", "drv_pcie"),
    _r("timeout", "load", "Load timeout.", "drv_pcie"),
    _r("timeout", "depend_modules", "Wait depend modules timeout.", "drv_pcie"),
    _r("timeout", "bios_boot_mode", "Wait boot mode from bios time out.", "drv_pcie"),
    _r("timeout", "sema", "get sema timeout,", "devdrv"),
    _r("timeout", "sema_init", "devid ", "devdrv", extract=r"^devid (?P<devid>-?\d{1,10}) "),
    _r("timeout", "ioctl_finish", "Wait ioctl finish timeout.", "ascend_dev"),
    _r("timeout", "uda_detect", "Wait timeout.", "uda"),
    _r("timeout", "cq_wait", "Wait timeout.", "trs_drv"),
    _r("timeout", "task_done", "Wait task done.", "trs_drv"),
    _r("log", "abnormal_free", "Abnormal free.", "trs_drv"),
]

RESET: List[Rule] = [
    _step("drain_wait", "Device is being used, please wait."),
    _step("ready_for_hotreset", "Device is ready for hotreset."),
    _step("unbind", "Pcie hotreset, unbind driver."),
    _step("remove_start", "Remove driver start."),
    _step("device_offline", "Device offline."),
    _step("remove_davinci", "Remove davinci_dev success."),
    _step("remove", "Remove driver exit."),
    _step("reset_begin", "Device hot reset begin."),
    _step("ready_dev_num", "Get ready_dev_num."),
    _step("unbind_all", "Pcie hotreset before hot reset unbind."),
    _step("reset_begin", "Device do hot reset."),
    _step("bridge_reset", "Pcie hotreset parent, reset bridge secondary bus."),
    _step("bridge_reset_parent", "Pcie hotreset parent."),
    _step("function_reset", "Reset function abnormal.", set=FAILED),
    _step("function_reset", "Reset function."),
    _step("vf_function_reset", "Reset vf function."),
    _r("link", "link_disable", "Bus ", "drv_pcie", contains=" link disable", extract=_BUS),  # A3, before reset
    _r("link", "link_enable", "Bus ", "drv_pcie", contains=" link enable", extract=_BUS),  # A3, after reset
    _step("bus_remove", "Pcie hotreset, bus remove."),
    _step("bus_remove", "Device bus remove."),
    _step("after_bus_remove", "Pcie hotreset, after bus remove."),
    _step("rescan", "Pcie hotreset, rescan device."),
    _step("rescan", "Device bus rescan."),
    _step("rescan_cost", "Get rescan cost time."),
    _step("probe", "Probe driver IN."),
    _step("probe_wait_os", "Probe driver ends, waiting for device os"),
    _step("probe_out", "Probe driver OUT."),
    _step("hot_reset_success", "Pcie hotreset, hot reset success."),
    _step("boot_mode", "Get boot mode from bios."),
    _step("load_file", "Notice BIOS to Load file."),
    _step("device_load_success", "Device load success."),
    _step("os_load_success", "Device os load success."),
    _step("half_probe_start", "devdrv_load_half_probe start."),
    _step("half_probe_finish", "Half probe finish, probe success."),
    _step("prereset", "Call devdrv_pcie_prereset start."),
    _step("reinit", "Call devdrv_pcie_reinit."),
    # failures and refusals: a reset step with ret != 0 closes the sequence as failed
    _step("device_on_process", "Pcie hotreset, but device on process.", set=FAILED),
    _step("hot_reset_error", "Pcie hotreset error.", set=FAILED),
    _step("cannot_hotreset", "Can not hotreset.", set=FAILED),
    _step("cannot_hotreset", "Device cannot hotreset.", set=FAILED),
    _step("not_ready_to_unbind", "Not ready to unbind device.", set=FAILED),
    _step("os_load_failed", "Device os load failed.", set=FAILED),
    _r("log", "hotreset_executing", "Hotreset is executing.", "dms_module", dev=["dev_phy_id"]),
    _r("log", "hotreset_running", "Hotreset is running.", "dms_module"),
    _step("uda_ctrl_failed", "Uda ctrl hotreset failed.", "dms_module"),
    _step("single_failed", "Hotreset single device failed.", "dms_module"),
    _step("all_failed", "Hotreset all devices failed.", "dms_module"),
    _step("hotreset_failed", "Hotreset failed.", "dms_module"),
    _step("refused_split", "The device has been split.", "dms_module", set=FAILED),
    _step("refused_not_supported", "910_A2 Pcie card not phy mach not support hot_reset.", "dms_module", set=FAILED),
    _step("refused_busy", "Business count of device is not 0.", "devmm", set=FAILED),
    _r("log", "hotreset_stop_flag", "Hotreset stop flag has been set", "devmm"),
    _r("log", "hdc_blocked_by_reset", "Can not send message while hot reset flag is set.", "hdcdrv"),
    # 950 / UB
    _step("reset_begin", "Hot reset begin.", "", dev=["devid", "uid"]),
    _step("hot_reset_success", "Hotreset, hot reset success.", ""),
    _step("hotreset_failed", "Hot reset failed.", "", dev=["dev_id"], set=FAILED),
]

LINK: List[Rule] = [
    _r("link", "aer_error_detected", "Error detected.", "drv_pcie"),
    _r("link", "aer_noncritical", "Channel is in normal state.", "drv_pcie"),
    _r("link", "aer_critical", "Channel is blocked.", "drv_pcie"),
    _r("link", "aer_slot_reset", "Enter slot reset.", "drv_pcie"),
    _r("link", "aer_resume_pending", "The resume of top business", "drv_pcie"),
    _r("link", "aer_resume", "Enter pcie reporting resume.", "drv_pcie"),
    _r("link", "aer_slot_reset_failed", "Slot_reset failed.", "drv_pcie"),
    _r("link", "aer_enable_failed", "Call ka_pci_enable_device failed.", "drv_pcie"),
    _r("link", "aer_regions_failed", "Call ka_pci_request_regions failed.", "drv_pcie"),
    _r("link", "aer_dma_mask_failed", "dma_set_mask 64 bit failed.", "drv_pcie"),
    _r("link", "aer_pci_ctrl_invalid", "pci_ctrl is invalid.", "drv_pcie"),
    _r("link", "link_problem", "Link may has problem.", "drv_pcie"),
    _r("link", "link_speed_invalid", "link_speed_raw is invalid.", "drv_pcie"),
    _r("link", "link_status_failed", "Failed to read link status.", "drv_pcie"),
    _r("link", "mac_link_info_failed", "get mac link info err.", ""),
    _r("link", "subsystem_vendor_invalid", "subsystem_vendor is invalid.", "drv_pcie"),
]

ALLOC: List[Rule] = [
    _r("alloc_fail", "dma_coherent", "Alloc dma coherent failed.", "drv_pcie"),
    _r("alloc_fail", "dma_memory", "Dma memory not enough.", "drv_pcie"),
    _r("alloc_fail", "dma_buffer", "Dma buffer is not enough.", "drv_pcie"),
    _r("alloc_fail", "kvzalloc", "Kvzalloc failed.", "devmm"),
    _r("alloc_fail", "kvzalloc", "Kvzalloc fail.", "devmm"),
    _r("alloc_fail", "remap_pages", "Remap pages failed.", "devmm"),
    _r("alloc_fail", "heap", "Heap is NULL or error.", "devmm", dev=["device"]),
    _r("log", "message_send_failed", "Message send failed.", "devmm"),
    _r("alloc_fail", "advise", "Can not advise.", "devmm"),
    _r("alloc_fail", "dev_mem", "Can not alloc dev mem.", "devmm"),
    _r("log", "node_info", "Node info.", "devmm"),
    _r("alloc_fail", "pages", "Can not alloc pages.", "devmm"),
    _r("alloc_fail", "host_mem", "Can not alloc host mem.", "devmm"),
    _r("log", "mem_stats", "hostpid=", "devmm"),
    _r("alloc_fail", "uda_oom", "Out of memory.", "uda"),
    _r("alloc_fail", "mem_alloc", "Mem alloc failed.", "trs_drv"),
    _r("alloc_fail", "malloc", "Malloc failed.", "trs_drv"),
]

ECC: List[Rule] = [
    _r("ecc", "fault_event", "event_id=", "fault_manager"),
]

# the driver saying a device is dead or unreachable (kind "fault": a `device_fault` finding on that device);
# any module, as the field shows them from drv_pcie and devdrv
FAULTS: List[Rule] = [
    _r("fault", "device_abnormal", "Device is abnormal.", ""),
    _r("fault", "send_msg_failed", "", "", contains="send_msg unsuccessful."),
]

# lines without the [ascend] prefix
KERNEL: List[Rule] = [
    _r("alloc_fail", "page_allocation", "", "kernel", contains="page allocation failure: order:"),
]

RULES: List[Rule] = [*HEARTBEAT, *TIMEOUTS, *RESET, *LINK, *ALLOC, *ECC, *FAULTS]
