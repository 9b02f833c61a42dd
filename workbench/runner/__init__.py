"""runner layer."""
