import sys

from scripts.gpu_check.main import main

sys.exit(main())
