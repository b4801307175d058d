"""Scripts that print figures (the soak, sweep cost); never timed tests."""
