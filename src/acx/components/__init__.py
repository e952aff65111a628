"""acx.components."""
