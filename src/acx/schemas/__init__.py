"""acx.schemas."""
