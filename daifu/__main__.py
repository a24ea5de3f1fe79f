"""`python -m daifu ...`: the `daifu` command line."""

from daifu.cli import main

raise SystemExit(main())
