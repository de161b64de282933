"""The conformance suite: thin test modules parametrized by the amp-conformance plugin.

Run it with ``pytest --pyargs amp_conformance --device <type>`` once the package is
installed. The project's own tests (of the suite itself) live in ``tests/``.
"""

from amp_conformance.plugin.processes import import_past_rewriting

# Before the test modules import it: from its bytecode, not rewritten by pytest (see
# amp_conformance.plugin.processes).
import_past_rewriting("hypothesis")
