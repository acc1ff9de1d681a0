"""``python -m gpuguard.webhook``: the same entry point as the ``gpuguard`` command."""

import sys

from gpuguard.webhook.main import main

sys.exit(main())
