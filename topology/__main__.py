import sys

from topology.cli import main

sys.exit(main())
