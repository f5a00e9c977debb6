"""Subcommands of the npu-trace CLI, one module each."""
