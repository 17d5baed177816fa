import sys

from stagegate.cli import main

sys.exit(main())
