"""The conformance report: collected from pytest's reports, rendered as JSON/HTML/Markdown."""
