"""Tests of SideroLink: joining herder through the Provision API and WireGuard."""
