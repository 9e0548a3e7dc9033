"""``python -m shardscope``: the same as the ``shardscope`` command."""

from shardscope.cli import main

raise SystemExit(main())
