"""Multi-process cluster tests (a controller and brokers on loopback; see harness.py)."""
