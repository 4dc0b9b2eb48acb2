"""Run blindcore from anywhere (``python path/to/run.py serve|mcp|jobs ...``): the same as
``python -m blindcore`` from this folder, for a caller whose working directory is elsewhere."""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
runpy.run_module("blindcore", run_name="__main__", alter_sys=True)
