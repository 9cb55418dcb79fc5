"""mgg's tests, one folder per subsystem (ARCHITECTURE.md). A package, so that test modules are named by their path
(tests.nn.test_nn) and the shared helpers here import as `from tests import emulator`."""
