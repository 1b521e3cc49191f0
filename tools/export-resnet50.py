#!/usr/bin/python3
"""export-resnet50: the old name of tools/export-resnet.py, kept working.

The same program with the same options; its defaults (--arch resnet50,
--classes 1000) are what this name always wrote."""
import os
import sys

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    os.execv(sys.executable, [sys.executable, os.path.join(here, "export-resnet.py")] + sys.argv[1:])
