"""The compiled parts: the page walker (npu_trace/ftrace/_walk.c), the counting sort
(npu_trace/pipeline/_order.c), the latency detector's runs of samples (npu_trace/detectors/_spikes.c), the text
lines' assembly (npu_trace/sinks/_lines.c), the exporters' byte assembler (npu_trace/export/_wire.c), their
pieces' rows (_rows.c), lane placement (_lanes.c), distinct strings (_texts.c), interrupt handlers' pairing
(_handlers.c) and flow ids (_flows.c); everything else is declared in pyproject.toml.

optional=True: where no compiler is, the install goes on without them and npu_trace.ftrace.walk runs its pure-Python
walk, npu_trace.pipeline.order its numpy sorts, npu_trace.detectors.latency its numpy scan, npu_trace.sinks.text its
pure-Python lines, npu_trace.export.wire, rows, lanes, texts, handlers and tracks (the flow ids) their Python twins
(the same results, slower); `npu-trace doctor` says which ones run. (Kept here: declaring extensions in
pyproject.toml needs setuptools 74, newer than the distributions' own.)

-O3: a distribution's Python compiles extensions with its own optimization level (Debian 12's compiler line:
"-DNDEBUG -g -fwrapv -O2 -Wall ... -g -fwrapv -O2"); the options given here come after those, and the last one
wins. Measured on the 2-vCPU VM the benchmarks run on, the export of a 2 M-event recording to Chrome JSON, 5
alternating runs of each build: the byte assembler 164 -> 135 ms, the pieces' rows 52 -> 46 ms, the lanes 97 -> 86
ms, the drawing's process 1023 -> 955 ms (medians, the same bytes written); check's analysis of the detector-heavy
recording 193, 200 and 169 ms against 198, 206 and 206 (three rounds, medians of 7 in-process runs).
"""

from setuptools import Extension, setup


def _c(name: str, source: str) -> Extension:
    # npu_trace/decimal.h: the decimal digits the text writers share (_wire.c, _lines.c include it)
    return Extension(name, [source], optional=True, extra_compile_args=["-O3"], depends=["npu_trace/decimal.h"])


setup(
    ext_modules=[
        _c("npu_trace.ftrace._walk", "npu_trace/ftrace/_walk.c"),
        _c("npu_trace.pipeline._order", "npu_trace/pipeline/_order.c"),
        _c("npu_trace.detectors._spikes", "npu_trace/detectors/_spikes.c"),
        _c("npu_trace.sinks._lines", "npu_trace/sinks/_lines.c"),
        _c("npu_trace.export._wire", "npu_trace/export/_wire.c"),
        _c("npu_trace.export._rows", "npu_trace/export/_rows.c"),
        _c("npu_trace.export._lanes", "npu_trace/export/_lanes.c"),
        _c("npu_trace.export._texts", "npu_trace/export/_texts.c"),
        _c("npu_trace.export._handlers", "npu_trace/export/_handlers.c"),
        _c("npu_trace.export._flows", "npu_trace/export/_flows.c"),
    ]
)
