"""acx.testing."""
