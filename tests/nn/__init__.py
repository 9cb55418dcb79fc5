"""mgg.nn: the layers against PyG's, their arguments, PyG's tools, the sharded embedding bags on one process."""
