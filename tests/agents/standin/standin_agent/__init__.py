"""A stand-in for mini-swe-agent (tests only): the same command line (``mini -y
--exit-immediately -m MODEL -t TASK -o TRAJECTORY``), the same model variables (litellm's
``OPENAI_API_BASE``/``OPENAI_API_KEY``) and the same loop shape — the model answers with one
```bash``` block per turn, the agent runs it and sends back the output; a reply without a block
ends the episode. Stdlib only, so it installs offline from a wheel."""

__version__ = "0.1.0"
