"""Tests of the API server, run against a real herder serve."""
