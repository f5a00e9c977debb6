"""Sinks: where decoded events go (terminal text, NDJSON, later recordings and the TUI)."""
