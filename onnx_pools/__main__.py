import sys

from onnx_pools.cli import main

sys.exit(main())
