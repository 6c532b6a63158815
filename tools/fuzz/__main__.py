"""``python -m tools.fuzz``: the readers' fuzzer's command line (see ``__init__``)."""
import sys

from . import main

sys.exit(main())
