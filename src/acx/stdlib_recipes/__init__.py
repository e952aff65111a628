"""acx.stdlib_recipes."""
