"""Device knowledge: what the Ascend driver, its HAL and its tools are, as data and pure functions.

`hal` (the HAL functions and driver hooks the simulator exports, their parameters and return codes),
`profiles` (targets as data: events, struct layouts, normalization rules, reset and latency definitions),
`kmsg_templates` and `kmsg` (the driver's log lines and their parser), `npusmi` (npu-smi's output formats),
`uevents` (what the driver's uevents mean), `bpf_rules` (how the BPF channel's events normalize).
Both the sources and the simulator import it; it imports nothing above the event model.
"""
