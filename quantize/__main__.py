import sys

from quantize.cli import main

sys.exit(main())
