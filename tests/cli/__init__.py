"""Tests of the herder command line, run as subprocesses against a real server."""
