"""amp-conformance: a conformance test suite for PyTorch autocast implementations."""

__version__ = "0.1.0"
