"""Write the golden fixture catalogue: ``python tools/make_fixtures.py [OUT]`` (default ``fixtures/``).

Every valid fixture is ``<name>.mrec/``, ``<name>.mrec.zip`` and its sidecar ``<name>.json``; invalid
ones are under ``invalid/``; ``README.md`` is the catalogue.  Generation is deterministic, so running
it again over the committed tree changes no byte (``spec_tests/check/test_fixtures.py`` checks it).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mrec.check.fixtures import make_fixtures, summary  # noqa: E402


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "fixtures"
    print(summary(out, make_fixtures(out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
