"""The ``tfdist`` command line: thin click commands over the library API."""
