"""ftrace: format parsing and binary page decoding (pure)."""
