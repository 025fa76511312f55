"""The infra provider SDK."""
