"""Scripts the suites start in child processes (torchrun ranks); run as files, not imported."""
