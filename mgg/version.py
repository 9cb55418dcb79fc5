"""mgg's version (pyproject.toml's `version`; tests/packaging checks that they agree): a leaf module,
so that what records it (a prepared manifest, a checkpoint) imports no package above it."""

__version__ = "0.1.0"
