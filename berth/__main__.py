import sys

from berth.cli import main

sys.exit(main())
