"""The async Python client of herder's API."""
