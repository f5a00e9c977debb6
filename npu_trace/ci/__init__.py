"""CI replay: the detectors run over a recording (`analyze`), judged by rules (`rules`), reported as text,
JSON or JUnit XML (`report`): what `npu-trace check` and `diff` are made of."""
