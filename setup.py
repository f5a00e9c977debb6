"""The compiled parts: the page walker (npu_trace/ftrace/_walk.c), the counting sort
(npu_trace/pipeline/_order.c), the latency detector's runs of samples (npu_trace/detectors/_spikes.c), the text
lines' assembly (npu_trace/sinks/_lines.c), the exporters' byte assembler (npu_trace/export/_wire.c), their
pieces' rows (_rows.c), lane placement (_lanes.c), distinct strings (_texts.c) and interrupt handlers' pairing
(_handlers.c); everything else is declared in pyproject.toml.

optional=True: where no compiler is, the install goes on without them and npu_trace.ftrace.walk runs its
pure-Python walk, npu_trace.pipeline.order its numpy sorts, npu_trace.detectors.latency its numpy scan,
npu_trace.sinks.text its pure-Python lines, npu_trace.export.wire, rows, lanes, texts and handlers their Python
twins (the same results, slower); `npu-trace doctor` says which ones run. (Kept here: declaring extensions in
pyproject.toml needs setuptools 74, newer than the distributions' own.)
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("npu_trace.ftrace._walk", ["npu_trace/ftrace/_walk.c"], optional=True),
        Extension("npu_trace.pipeline._order", ["npu_trace/pipeline/_order.c"], optional=True),
        Extension("npu_trace.detectors._spikes", ["npu_trace/detectors/_spikes.c"], optional=True),
        Extension("npu_trace.sinks._lines", ["npu_trace/sinks/_lines.c"], optional=True),
        Extension("npu_trace.export._wire", ["npu_trace/export/_wire.c"], optional=True),
        Extension("npu_trace.export._rows", ["npu_trace/export/_rows.c"], optional=True),
        Extension("npu_trace.export._lanes", ["npu_trace/export/_lanes.c"], optional=True),
        Extension("npu_trace.export._texts", ["npu_trace/export/_texts.c"], optional=True),
        Extension("npu_trace.export._handlers", ["npu_trace/export/_handlers.c"], optional=True),
    ]
)
