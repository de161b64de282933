"""The packages to ship: every package of amp_conformance, found (a check family is a folder,
never a line here), and ``amp_conformance.oplists``, which no search finds because its files
live at the top of the checkout (``oplists/``, data only; mapped in pyproject.toml). All the
rest of the build is in pyproject.toml."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["amp_conformance", "amp_conformance.*"]),
                "amp_conformance.oplists"])
