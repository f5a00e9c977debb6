"""Export: a recording drawn as a Perfetto trace or Chrome JSON (`run`), the track mapping (`track_map`), the
writers and the pieces they are assembled from."""
