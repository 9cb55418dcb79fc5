"""The programs of examples/."""
