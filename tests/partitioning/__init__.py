"""mgg.partitioning: the partition methods, their cache and statistics."""
