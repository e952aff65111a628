"""Built-in recipes: Python ones listed in ``RECIPE_CLASSES``, declarative ones in ``*.acx`` here.

The planner's registry (``acx.compiler._recipes.builtin_registry``) takes them in this order:
``RECIPE_CLASSES`` first, then the ``.acx`` files sorted by name (RC1, RC3).
"""

from __future__ import annotations

from acx.stdlib_recipes._harbor import HarborDockerfileWorkdir

__all__ = ["RECIPE_CLASSES", "HarborDockerfileWorkdir"]

RECIPE_CLASSES = [HarborDockerfileWorkdir]
