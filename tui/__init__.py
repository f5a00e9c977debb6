"""The Textual TUI of npu-trace. It imports npu_trace; npu_trace never imports it."""
