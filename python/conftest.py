"""pytest set-up for ferry's Python side: import ``ferry`` from this tree."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
