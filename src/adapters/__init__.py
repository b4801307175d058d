"""Adapters for stall_core's ports: memory, Postgres, HTTP, and the CLI that wires them."""
