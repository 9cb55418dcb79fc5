"""mgg.runtime: the tuner, its cost, kernel and resource models, the config cache."""
