"""The reference pipeline: the per-event object path (page decoder, ordered merge and timeline, normalizer,
analysis, text) that the production path, columns from the page to every output, is held equal to."""
