"""The core: Graph (mgg/graph.py), Plan and its block schedule (mgg/plan.py), the ops (mgg/ops.py, mgg/steps.py)
on the CPU executor and the emulated CUDA path, the oracles (mgg/testing.py) and the native C++ tests
of csrc/core (CMakeLists.txt)."""
