"""mgg.tuning: the tuner, its cost and resource models, the config cache."""
