"""mgg.data: the loaders against their reference implementations, dataset resolution."""
