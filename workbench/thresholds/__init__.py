"""thresholds layer."""
