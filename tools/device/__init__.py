"""Checks run by hand on a GPU machine (the device tool): never by the suite or CI."""
