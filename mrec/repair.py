"""``python -m mrec.repair`` (documented command): the code lives in :mod:`mrec.check.repair`."""
from .check.repair import *  # noqa: F401,F403
from .check.repair import __all__, main  # noqa: F401

if __name__ == "__main__":
    raise SystemExit(main())
