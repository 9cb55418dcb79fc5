"""The training loops of node classification: one process (loop.py: the models' published
protocols, seeds, early stopping, test accuracy) and every rank under torchrun (torchrun.py: the
same loop over a DistGraph, weight gradients all-reduced)."""

from .loop import TrainConfig, train

__all__ = ["TrainConfig", "train"]
