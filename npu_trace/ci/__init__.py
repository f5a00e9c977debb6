"""CI replay: the detectors run over a recording (`recording_analysis`), judged by the rules
(`npu_trace.detectors.rules`), reported as text, JSON or JUnit XML (`check_report`): what `npu-trace check`,
`diff` and the cluster view are made of."""
