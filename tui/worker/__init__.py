"""The worker process: the source (live tracefs and channels, a recording, a fake), the timeline, every
detector and the view collector. A fresh interpreter that never imports Textual nor the UI's modules; it
talks to the UI only through `tui.messages` values over a pipe (`tui.worker.main`)."""
