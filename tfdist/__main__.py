"""``python -m tfdist`` is the ``tfdist`` command."""
from tfdist.cli.main import main

main()
