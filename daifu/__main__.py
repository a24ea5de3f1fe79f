"""`python -m daifu ...`: the `daifu` command line."""

from daifu.cli.main import main

raise SystemExit(main())
