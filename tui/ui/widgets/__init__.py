"""The TUI's views, one per file."""
