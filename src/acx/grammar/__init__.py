"""acx.grammar."""
