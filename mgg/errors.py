"""Errors that mgg raises for bad input: one line that names the file, line or field at fault."""


class MggError(ValueError):
    """Base class of mgg's input errors; the CLI prints these as one line and exits with 2."""


class GraphError(MggError):
    """A graph, a graph file or the features that come with it are malformed."""


class PlanError(MggError):
    """A plan or its configuration (ranks, ps, dist, wpb) is invalid."""


class MissingPackageError(MggError):
    """An optional package that a feature needs is not installed (the message names the pip extra)."""
