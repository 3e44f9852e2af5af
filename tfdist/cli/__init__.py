"""The ``tfdist`` command line: thin click commands over the library API.

Layering: the top (beside ``tfdist.testing``): it may import every package; none imports it
(pyproject.toml's import contracts).
"""
