"""`python -m orderflow`: the same as the `orderflow` command."""

from __future__ import annotations

import sys

from orderflow.entry import main

sys.exit(main())
