import sys
from pathlib import Path

# tests/ holds shared builders (tracegen.py); make them importable as plain modules.
sys.path.insert(0, str(Path(__file__).parent))
