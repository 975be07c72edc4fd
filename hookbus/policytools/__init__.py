"""Policy as code: ``hookbus policy test``, ``hookbus policy lint`` and ``hookbus policy coverage``.

``cases`` reads test files (what a policy must decide, case by case), ``runner`` runs each case
in this process with the dispatcher's own engine and no Redis (``state`` holds the session
state a case gives), ``report`` writes the results as text, JSON or JUnit XML; ``lint`` finds
rules that can never decide and other mistakes a valid policy can hold; ``coverage`` adds up
from the decision log which handlers and rules decided real traffic; ``command`` is the CLI.

Imports: bus, hookbus.replay, workers.engine, workers.handlers, workers.services.
"""
