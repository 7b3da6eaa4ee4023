import sys

from parley.cli import main

sys.exit(main())
