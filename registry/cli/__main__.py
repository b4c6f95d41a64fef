"""`python -m registry.cli`: the `registry` command."""

from registry.cli import main

raise SystemExit(main())
