"""The package as a whole: its build and install, the import graph of the tree, the design card's layout, the README."""
