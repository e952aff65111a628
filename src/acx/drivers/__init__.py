"""acx.drivers."""
