"""``python -m derl.evaluation RUN_DIR TASK ID SEED OUT_DIR [KEY VALUE ...]``: one cell's training.

The entry point of ``derl.evaluation.cell`` lives here because the package imports ``cell``
(through ``runner``): running ``-m derl.evaluation.cell`` would load it twice and warn.
"""

import sys

from derl.evaluation.cell import main

main(sys.argv[1:])
