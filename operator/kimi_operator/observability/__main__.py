"""Regenerate the chart's rules and dashboards (`--check`: fail when the committed ones drift)."""

import sys

from kimi_operator.observability.generate import main

sys.exit(main(sys.argv[1:]))
