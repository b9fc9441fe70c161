"""The cluster node (see the docstring written in a later commit)."""
