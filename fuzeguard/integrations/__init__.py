"""Native integrations: each module plugs fuzeguard into one agent framework's own extension
point, so that a detection acts in the framework's terms. Each needs its framework installed
(``pip install 'fuzeguard[langchain]'`` and so on); importing one without it raises ImportError.

``KeyedRuns`` (no framework needed) keeps a run per conversation id, to judge the invocations of
one conversation together: ``with conversations.run_for(thread_id): agent.invoke(...)``.
"""

from fuzeguard.integrations._shared.runs import KeyedRuns

__all__ = ["KeyedRuns"]
