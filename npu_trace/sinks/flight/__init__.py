"""The flight recorder: the last minutes of a live session in memory, dumped around incidents.

`recorder.FlightRecorder` (its docstring shows how a service uses it) with `FlightSettings`; `live.LiveFlight`,
the pump sink that runs it beside its own analysis; `ring` (the bounded, compressed memory), `incidents` (when to
dump: pure), `dumps` (names and retention: pure).
"""
