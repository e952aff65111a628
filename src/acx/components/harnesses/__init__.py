"""Built-in harnesses (imported lazily through ``HARNESSES``) and what a harness that runs an
agent command needs from acx: turning the command's exit into issues, and the model rule.

A third-party harness imports these from here (``from acx.components.harnesses import
agent_exit_issues``); the built-ins use the same functions.
"""

from acx.components.harnesses._common import agent_exit_issues as agent_exit_issues
from acx.components.harnesses._common import has_agent_model as has_agent_model
from acx.components.harnesses._common import tail as tail

__all__ = ["agent_exit_issues", "has_agent_model", "tail"]
