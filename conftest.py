"""Root conftest of the amp-conformance checkout.

The plugin itself is registered through the ``pytest11`` entry point of the installed
package (``pip install -e .``); here we only enable pytester, which the project's own
tests in ``tests/`` use to run the suite against broken autocast implementations.
"""

pytest_plugins = ("pytester",)
