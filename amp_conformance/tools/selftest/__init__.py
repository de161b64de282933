"""Mutation testing of the suite: the catalogue of broken autocasts, the runner, its plugin."""
