"""``python -m anyshape.check``: the ``anyshape-check`` tool
(``anyshape.tools.check``), under the name it had before it was a tool."""

import sys

from anyshape.tools.check import main

if __name__ == "__main__":
    sys.exit(main())
