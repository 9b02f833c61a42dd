"""shadow layer."""
