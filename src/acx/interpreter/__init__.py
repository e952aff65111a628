"""acx.interpreter."""
