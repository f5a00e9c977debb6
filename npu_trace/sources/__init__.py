"""Sources: the I/O edge. Each owns its kernel resources and cleans them up."""
