"""acx.compiler."""
