"""Benchmarks of npu-trace (run with `scripts/bench`): they print figures and ratios, never pass/fail on timing."""
