"""`python -m gpu_binder.devcluster` (make dev-cluster): see command.py."""

import sys

from gpu_binder.devcluster.command import main

sys.exit(main())
