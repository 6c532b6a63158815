"""``python -m tools.bench``: the benchmark suite's command line (see ``__init__``)."""
from . import main

main()
