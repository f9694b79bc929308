import sys

from onnx_pools.bench import main

sys.exit(main())
