"""An example acx plugin: the ``word_count`` benchmark and the ``word_counter`` harness.

Both are ordinary classes subclassing acx's public bases; ``pyproject.toml`` registers them in the
``acx.benchmarks`` / ``acx.harnesses`` entry-point groups. Without installing, a spec can name
them by ``module:Class`` id instead (``harness: {id: "acx_example_plugin.harness:WordCounterHarness"}``).
"""
