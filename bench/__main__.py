import sys

from bench.entry import main

sys.exit(main())
