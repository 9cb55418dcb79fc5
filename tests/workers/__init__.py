"""The scripts torchrun starts for tests/distributed/ (run as scripts, not collected as tests)."""
