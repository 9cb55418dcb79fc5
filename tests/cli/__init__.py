"""The top of the stack: the mgg command (mgg/cli.py) and the training loop (mgg/train.py)."""
