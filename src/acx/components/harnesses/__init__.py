"""Built-in harnesses: ``none``, ``command``, ``oracle``, ``openai_chat``, ``installed_agent`` (imported lazily)."""

__all__: list[str] = []
