"""Built-in harnesses: ``none``, ``command``, ``oracle``, ``openai_chat`` (imported lazily)."""

__all__: list[str] = []
