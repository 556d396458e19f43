import sys

from engine.worker import main

sys.exit(main())
