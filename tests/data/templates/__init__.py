"""Cluster templates in Omni's format: valid ones with their rendered objects, one invalid template per
kind of mistake, and the template of the end-to-end test."""

from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent
