"""A Kubernetes API emulator for testing the Kubernetes backend (see README.md)."""

from .emulator import Emulator
from .stats import Gauge, Stats

__all__ = ["Emulator", "Gauge", "Stats"]
