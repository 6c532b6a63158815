"""``python -m tools.crashcheck``: the crash-consistency checker's command line (see ``__init__``)."""
import sys

from . import main

sys.exit(main())
