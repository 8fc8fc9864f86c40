"""Regenerate the chart's rules and dashboards: `python -m kimi_operator.observability [--check]`."""

import sys

from kimi_operator.observability.generate import main

sys.exit(main(sys.argv[1:]))
