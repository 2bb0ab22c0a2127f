"""The test labs: real servers and hosts this machine runs for the tests."""
