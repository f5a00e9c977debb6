"""The UI process: the Textual app, its widgets and its entry points. It receives `tui.messages` values from
the worker process (`tui.ui.client`), never a kernel event, and never imports the worker's modules."""
